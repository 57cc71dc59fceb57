# The two commands a new user runs: `make demo` and `make test`.
# Both create .venv and install what they need: the demo only the package (and its runtime
# dependencies), the tests also the dev group. Each has its own stamp, so either works from
# a fresh clone and in any order.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-package
STAMP := $(VENV)/.installed
# The PostgreSQL pass's worker processes (pytest-xdist): its tests mostly wait on the server,
# so two keep two cores busy (the whole suite there: about 17 min over two). The SQLite pass stays serial (its CI record; over two workers
# it took 6.5 min instead of 16, but met two timing assumptions of tests in three runs).
PASS_WORKERS ?= -n 2

.PHONY: demo demo-daemon demo-postgres test test-postgres test-fast test-console check lint typecheck unit chaos bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The package alone: what `agentkeep demo` needs.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $(DEMO_STAMP)

# Everything the tests, linters and type checker need (`--group` needs pip 25.1).
$(STAMP): pyproject.toml $(DEMO_STAMP)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $(STAMP)

## test: lint, type-check and run the suite (what CI runs): the whole suite on SQLite, then
## the whole suite again on throwaway PostgreSQL clusters over PASS_WORKERS processes
## (pytest-xdist), each pass naming its slowest tests (docs/development.md); first installs
## the PostgreSQL server package when the machine has none (scripts/postgres-cluster) and
## Debian's Chromium (the console's browser tests: scripts/browser-deps). pytest's exit 5,
## no test selected, fails it like any other.
test: check
	scripts/postgres-cluster install > /dev/null
	scripts/browser-deps > /dev/null
	AGENTKEEP_TEST_DATABASE=sqlite $(BIN)/python -m pytest --durations=25
	AGENTKEEP_TEST_DATABASE=postgres $(BIN)/python -m pytest --durations=25 $(PASS_WORKERS)

## test-postgres: the PostgreSQL pass alone (AGENTKEEP_TEST_DATABASE=postgres: every
## test's stores on a throwaway cluster each worker starts and stops, scripts/postgres-cluster;
## installs the server package when missing), over PASS_WORKERS. Exit 5 fails it too.
## AGENTKEEP_TEST_POSTGRES_URL=URL runs it on a server you started instead.
test-postgres: $(STAMP)
	scripts/postgres-cluster install > /dev/null
	scripts/browser-deps > /dev/null
	AGENTKEEP_TEST_DATABASE=postgres $(BIN)/python -m pytest --durations=25 $(PASS_WORKERS)

## test-fast: the unit suite without its slow tests (processes, the daemon as a process,
## fuzzing: tests/unit/conftest.py names them), with CI's hypothesis profile (60 examples,
## derandomized), over two worker processes (pytest-xdist); no lint, no type check
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit -m "not slow" -q -p no:cacheprovider \
		--hypothesis-profile=ci --durations=10 -n 2

## test-console: the console's browser tests (headless Debian Chromium over a real daemon),
## installing the package when missing (scripts/browser-deps)
test-console: $(STAMP)
	scripts/browser-deps > /dev/null
	$(BIN)/python -m pytest tests/unit/console -q -p no:cacheprovider --durations=10

check: lint typecheck

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	scripts/browser-deps > /dev/null
	$(BIN)/python -m pytest tests/unit

chaos: $(STAMP)
	$(BIN)/python -m pytest tests/chaos

## demo: the main job, on the embedded defaults
demo: $(DEMO_STAMP)
	$(BIN)/agentkeep demo

## demo-daemon: the same through the daemon (`agentkeep demo --daemon`), SIGKILLed mid-turn
demo-daemon: $(DEMO_STAMP)
	$(BIN)/agentkeep demo --daemon

## demo-postgres: the same crash demo on PostgreSQL, on a throwaway cluster (scripts/demo-postgres)
demo-postgres: $(DEMO_STAMP)
	AGENTKEEP=$(BIN)/agentkeep scripts/demo-postgres

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --group bench
	$(BIN)/python bench/store_writer.py
	$(BIN)/python bench/agent_step.py
	$(BIN)/python bench/agents_at_scale.py
	$(BIN)/python bench/step_anatomy.py
	$(BIN)/python bench/step_sql_floor.py
	$(BIN)/python bench/step_timeline.py
	$(BIN)/python bench/queue_backlog.py
	$(BIN)/python bench/saturation.py

clean:
	rm -rf $(VENV) .agentkeep .pytest_cache .mypy_cache .ruff_cache
