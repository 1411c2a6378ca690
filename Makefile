# The two commands of the README: `make run` (the sample application) and `make test`.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run test lint bench clean
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/setup.sh
	bash scripts/setup.sh

run: setup
	$(PY) -m samples.wordcount_exactly_once

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: setup
	$(PY) bench/engine.py && $(PY) bench/storage.py && $(PY) bench/wordcount.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
