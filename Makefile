# The project's command surface. `make demo` runs the main job; `make test` runs the tests.
# Both install what they need first, so a fresh machine needs nothing else.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: install demo test lint bench

install:
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev]'

demo: install
	geo-pipeline demo

test: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy
	$(PYTHON) -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy

bench: install
	for b in bench/*.py; do $(PYTHON) $$b || exit 1; done
