# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
# The suite on every core (pytest-xdist); each test file stays on one worker, so its
# fixtures are built once.
PYTEST := $(BIN)/python -m pytest -n auto --dist loadfile

.PHONY: demo test test-fast install dev lint format typecheck docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

dev: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'

## demo: install, prepare ./demo-workspace with the example skills, serve on $(HOST):$(PORT)
demo: install
	$(BIN)/amelio demo --dir demo-workspace --host $(HOST) --port $(PORT)

## test: install the dev extras, lint, check the layout and the imports, run the whole test suite
test: dev
	$(BIN)/ruff check src tests benchmarks .ci
	$(BIN)/ruff format --check src tests benchmarks .ci
	$(BIN)/lint-imports
	$(BIN)/cog --check --diff --check-fail-msg 'run `make docs`' docs/configuration.md docs/cli.md
	$(PYTEST)

## test-fast: the test suite without the tests marked slow (CI and `make test` run them all)
test-fast: dev
	$(PYTEST) -m "not slow"

## lint: ruff's rules and ruff's layout (`make format` applies the layout)
lint: dev
	$(BIN)/ruff check src tests benchmarks .ci
	$(BIN)/ruff format --check src tests benchmarks .ci
	$(BIN)/lint-imports

format: dev
	$(BIN)/ruff format src tests benchmarks .ci

typecheck: dev
	$(BIN)/mypy

## docs: regenerate the settings and command tables in docs/ from the code (cog)
docs: dev
	$(BIN)/cog -r docs/configuration.md docs/cli.md

## bench: every benchmark, then one table of targets met or missed (exit 1 if any missed)
bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache .ruff_cache .mypy_cache
