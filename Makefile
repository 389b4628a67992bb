# One-command set-up and checks. `make demo` and `make test` work on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= tf,kubernetes,ray,spark,plot,postgres,ui,dev

.PHONY: setup demo test test-fast lint docs bench clean kube-up kube-down kube-build yarn-up yarn-down

# The editable install runs tfdist from src/, which pip does not byte-compile: compile it here
# (every `make setup`; only changed modules are redone), so a launch reads .pyc files even
# where PYTHONDONTWRITEBYTECODE=1 stops Python writing them (it still reads them). Timestamp
# invalidation, named because SOURCE_DATE_EPOCH would switch compileall to checked hashes:
# an edited source no longer matches its .pyc's recorded mtime and size, so it wins.
setup: $(VENV)/.installed
	$(PY) -m compileall -q --invalidation-mode timestamp src

$(VENV)/.installed: pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

demo: setup
	$(VENV)/bin/tfdist run examples/digits/mwms.yaml

# The project's shell scripts, for shellcheck: .ci/run and every *.sh (a new one is checked
# without being listed here).
SHELL_SCRIPTS := .ci/run $(sort $(wildcard *.sh */*.sh */*/*.sh))
MKDOCS := $(VENV)/bin/mkdocs build --strict --quiet

# `make test` runs the checks first (what `make lint` runs), then the suite. The real control
# plane (kube/kube.sh) and YARN cluster (yarn/yarn.sh) are started once for the Kubernetes and
# YARN tests and always stopped after (the suite stops each once its tests have run:
# TFDIST_TEST_STOP_CLUSTERS, tests/conftest.py). A failed start or build never fails `make test`: those
# tests then skip with the reason (.kube/unavailable, .yarn/unavailable). The suite runs in
# TEST_WORKERS pytest-xdist workers, two by default (tests/conftest.py's SHARED says which
# tests stay together); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
test: lint
	-$(MAKE) kube-up
	-$(MAKE) yarn-up
	status=0; TFDIST_TEST_STOP_CLUSTERS=1 $(VENV)/bin/pytest -q -ra --durations=25 -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder || status=$$?; $(MAKE) yarn-down; $(MAKE) kube-down; exit $$status

test-fast: setup
	$(VENV)/bin/pytest -q -ra -m "not integration and not k8s and not ray and not spark and not yarn and not hosts and not postgres and not browser and not chaos and not network"

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks examples kube
	$(VENV)/bin/mypy
	@command -v shellcheck > /dev/null || { echo "shellcheck is not installed (apt-get install shellcheck)"; exit 1; }
	shellcheck $(SHELL_SCRIPTS)
	$(MKDOCS)

# The documentation site (docs/, mkdocs.yml) into site/; strict: a broken link or anchor, a
# page missing from nav or a nav entry without its page fails the build.
docs: setup
	$(MKDOCS)

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
	rm -rf tfdist-runs .pytest_cache site
