# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv once.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench docs clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/insitubatch demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Two workers, each taking whole test files (module fixtures are made once); TEST_WORKERS=0
# runs the suite in this process, one test after another.
TEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

bench: $(BIN)/.bench-installed
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.defaults $(DEFAULTS_ARGS)

$(BIN)/.docs-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	touch $@

# The site in site/: guides, design, and the API reference from the docstrings. --strict
# turns every warning (a broken link, a name the reference cannot find) into a failure.
docs: $(BIN)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache *.egg-info site
