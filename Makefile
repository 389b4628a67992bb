# One-command set-up and checks. `make demo` and `make test` work on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= tf,kubernetes,ray,spark,plot,dev

.PHONY: setup demo test test-fast lint bench clean kube-up kube-down kube-build yarn-up yarn-down

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: setup
	$(VENV)/bin/tfdist run examples/digits/mwms.yaml

# The real control plane (kube/kube.sh) and YARN cluster (yarn/yarn.sh) are started once for
# the Kubernetes and YARN tests and always stopped after. A failed start or build never fails
# `make test`: those tests then skip with the reason (.kube/unavailable, .yarn/unavailable).
test: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	-$(MAKE) kube-up
	-$(MAKE) yarn-up
	status=0; $(VENV)/bin/pytest -q -ra || status=$$?; $(MAKE) yarn-down; $(MAKE) kube-down; exit $$status

test-fast: setup
	$(VENV)/bin/pytest -q -ra -m "not integration and not ray and not spark and not yarn"

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

bench: setup
	$(PY) benchmarks/launch_overhead.py

kube-build:
	kube/kube.sh build

kube-up:
	kube/kube.sh up

kube-down:
	kube/kube.sh down

yarn-up:
	yarn/yarn.sh up

yarn-down:
	yarn/yarn.sh down

clean:
	rm -rf tfdist-runs .pytest_cache
