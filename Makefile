# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: demo test install dev lint typecheck bench clean

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

## test: install the dev extras, lint, run the whole test suite
test: dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest

lint: dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: dev
	$(BIN)/mypy

bench: install
	$(BIN)/python benchmarks/evals_throughput.py
	$(BIN)/python benchmarks/router_accuracy.py
	$(BIN)/python benchmarks/respond_overhead.py
	$(BIN)/python benchmarks/feedback_ingest.py
	$(BIN)/python benchmarks/search_latency.py
	$(BIN)/python benchmarks/load.py

clean:
	rm -rf $(VENV) demo-workspace .pytest_cache .ruff_cache .mypy_cache
