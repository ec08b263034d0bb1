# Entry points for a fresh machine:
#   make demo   — create .venv, install veil, run the demo on the embedded engine (DuckDB)
#   make check  — the unit lane: ruff, then pytest --lane unit (no servers, processes, Spark,
#                 browser, statistical or slow tests; see tests/lanes.py), in a few minutes
#   make test   — create .venv, install veil with its test, docs and release extras (Java for
#                 Spark; php-cli, phpunit, php-codesniffer, chromium and chromium-driver from
#                 Debian), then ruff, mypy --strict (with and without pyspark), the whole pytest
#                 suite in two processes with branch coverage, checked per package, the PHP
#                 client's PHPUnit tests and static checks, the docs site built strictly, and
#                 the wheel and sdist built and checked
#   make docs-serve — the docs site at http://127.0.0.1:8000, rebuilt on every edit
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
# the test extra without the spark extra: what a contributor without Spark has
NOSPARK := $(VENV)/nospark
COVERAGE := build/coverage
# Branch-coverage floors, per package (coverage.py's percent of lines + branch outcomes; see
# scripts/check_coverage.py): a run below any of them fails make test.
# A name ending in * is a family of root modules (veil.autobounds*: autobounds, autobounds_target…).
COVERAGE_FLOORS := veil.accounting=95 veil.noise=95 veil.mechanisms=95 veil.compile=95 \
	veil.release=95 veil.session=94 veil.autobounds*=92 veil.autolimits*=90 veil.autoboth=89 \
	veil.engines=85 veil.plan=92 veil.sql=93
# pytest's worker processes (pytest-xdist); each test file runs whole in one worker, so a
# module's fixtures (a server, a generated table) are built once. `make test WORKERS=4` on a
# bigger machine; each worker that reaches a Spark test starts its own local[2] JVM.
WORKERS ?= 2

# Debian packages the PHP client's tests and the browser tests need (installed if missing)
SYSTEM_PACKAGES := php-cli php-curl php-xml php-mbstring phpunit php-codesniffer chromium \
	chromium-driver

.PHONY: demo check test lint typecheck pytest phptest phpcheck docs docs-serve dist java system \
	bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.base: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(PIP) install --quiet -e '.[test,spark,docs,release]'
	touch $(VENV)/.base $@

$(NOSPARK)/.deps: pyproject.toml | $(BIN)/python
	$(PYTHON) -m venv $(NOSPARK)
	$(NOSPARK)/bin/python -m pip install --quiet -e '.[test]'
	@$(NOSPARK)/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('pyspark') is not None)" \
		|| { echo "$(NOSPARK) has pyspark: the test extra must not pull it in" >&2; exit 1; }
	touch $@

demo: $(VENV)/.base
	$(BIN)/veil demo

java:
	bash scripts/ensure-java.sh

system:
	bash scripts/ensure-debian.sh $(SYSTEM_PACKAGES)

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks scripts docs/hooks
	$(BIN)/ruff format --check src tests benchmarks scripts docs/hooks

# mypy --strict twice: against pyspark's own annotations (.venv has the spark extra), then as
# without the extra (every pyspark name Any: a value pyspark types is Any there). The second run
# resolves third-party packages in $(NOSPARK), same mypy, same configuration.
typecheck: $(VENV)/.dev $(NOSPARK)/.deps
	$(BIN)/mypy src/veil
	$(BIN)/mypy --python-executable $(NOSPARK)/bin/python --cache-dir .mypy_cache/nospark src/veil

pytest: $(VENV)/.dev java system
	mkdir -p $(COVERAGE)
	$(BIN)/pytest -n $(WORKERS) --dist loadfile --cov=veil --cov-branch --cov-report=json
	$(BIN)/python scripts/check_coverage.py $(COVERAGE)/coverage.json $(COVERAGE_FLOORS)

# the unit lane: what a contributor runs before each commit (the full lane is `make test`)
check: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks scripts docs/hooks
	$(BIN)/ruff format --check src tests benchmarks scripts docs/hooks
	$(BIN)/pytest --lane unit -n $(WORKERS) --dist loadfile -q

# the PHP client's PHPUnit tests, against a real `veil serve` they start on loopback
phptest: $(VENV)/.dev system
	VEIL_BIN=$(abspath $(BIN))/veil phpunit --configuration clients/php/phpunit.xml

# the PHP client's static checks: every file parses (php -l) and src/ keeps PSR-12 (phpcs).
# PHPStan and Psalm ship as PHARs from GitHub releases and Packagist, which this project's
# machines cannot reach; Debian packages neither.
phpcheck: system
	find clients/php examples/php-shop -name '*.php' -print0 | xargs -0 -n1 php -l -n > /dev/null
	phpcs --standard=PSR12 clients/php/src clients/php/autoload.php

# the docs site, built strictly: a broken link, anchor or API reference fails the build
DOCS_ENV := NO_MKDOCS_2_WARNING=1
docs: $(VENV)/.dev
	$(DOCS_ENV) $(BIN)/mkdocs build --strict --quiet

docs-serve: $(VENV)/.dev
	$(DOCS_ENV) $(BIN)/mkdocs serve

# the wheel and sdist, built from a clean dist/ and checked (metadata, py.typed, no tests)
dist: $(VENV)/.dev
	rm -rf dist
	$(BIN)/python -m build --outdir dist . > /dev/null
	$(BIN)/twine check --strict dist/*
	$(BIN)/python scripts/check_dist.py dist

test: lint typecheck pytest phptest phpcheck docs dist

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/bench_noise.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(COVERAGE) build/site dist
