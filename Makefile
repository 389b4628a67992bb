# One-command set-up and checks. `make demo` and `make test` work on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= tf,kubernetes,ray,spark,plot,dev

.PHONY: setup demo test test-fast lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: setup
	$(VENV)/bin/tfdist run examples/digits/mwms.yaml

test: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/pytest -q -ra

test-fast: setup
	$(VENV)/bin/pytest -q -ra -m "not integration and not ray and not spark"

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

bench: setup
	$(PY) benchmarks/launch_overhead.py

clean:
	rm -rf tfdist-runs .pytest_cache
