# The two commands of the README: `make run` (the sample application) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run test lint bench clean
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

run: setup
	$(PY) -m samples.wordcount_exactly_once

# Two workers: most of a test's time is spent waiting on Spark, Kafka or PostgreSQL, not on a
# core. Each worker starts the services it needs; TEST_JOBS=0 runs in one process. Tests are
# handed out two at a time, longest first (tests/conftest.py), so both workers end together.
TEST_JOBS ?= 2
test: setup
	$(PY) -m pytest -n $(TEST_JOBS) --maxschedchunk 2 --durations=25 $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: setup
	$(PY) bench/engine.py && $(PY) bench/storage.py && $(PY) bench/wordcount.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
