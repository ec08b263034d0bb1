# Two entry points for a fresh machine:
#   make demo   — create .venv, install veil, run the demo on the embedded engine (DuckDB)
#   make test   — create .venv, install veil with its test extras (and Java for Spark), then
#                 ruff, mypy --strict and the whole pytest suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: demo test lint typecheck pytest java bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[test,spark]'
	touch $(VENV)/.base $@

demo: $(VENV)/.base
	$(BIN)/veil demo

java:
	bash scripts/ensure-java.sh

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(VENV)/.dev
	$(BIN)/mypy src/veil

pytest: $(VENV)/.dev java
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/bench_noise.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
