# The project's command surface. `make demo` runs the main job; `make test` runs the tests.
# Both install what they need first, from the lock in requirements/ (exact versions and hashes),
# into a virtualenv of the project's own (.venv), so a fresh machine with Python >= 3.11 needs
# nothing else and every machine gets the same dependency set. `make lock` refreshes the lock
# after pyproject.toml changes; `make lock-check` fails if the lock is not current (CI runs it).
PYTHON ?= python3
PYTEST_ARGS ?=
VENV ?= .venv
# uv (pinned and hash-checked in requirements/uv.txt) resolves and installs. It is a single binary
# that requirements/bootstrap_uv.py fetches with the standard library alone (run with -I -S: no
# site-packages, no pip, no venv module), so a Debian/Ubuntu system Python (PEP 668, often without
# python3-venv) works like any other Python >= 3.11; uv then makes the project's virtualenv itself.
UV_VENV ?= .venv-uv
UV := $(abspath $(UV_VENV))/bin/uv
VENV_ABS := $(abspath $(VENV))
PY := $(VENV_ABS)/bin/python
# The test suite and the demo start the project's console scripts (geo-pipeline, weed, dagster-*).
export PATH := $(VENV_ABS)/bin:$(PATH)
export VIRTUAL_ENV := $(VENV_ABS)

.PHONY: install install-main demo test lint check-defs bench schema lock lock-check replay-tools

$(UV): requirements/uv.txt requirements/bootstrap_uv.py
	$(PYTHON) -I -S requirements/bootstrap_uv.py $(UV)
	@touch $@

$(PY): | $(UV)
	$(UV) venv --quiet --python $(PYTHON) $(VENV)

# `--compile-bytecode` writes every package's .pyc at install time: `geo-pipeline dev`'s webserver,
# daemon, code server and each Dagster run worker import Dagster (~1.4 s with .pyc, ~2.9 s without),
# and a shell with PYTHONDONTWRITEBYTECODE=1 would otherwise pay the compile on every start
# (measured: dev start-up 30-34 s without .pyc, 17.4 s with, same box; issue 36).
# `pip sync` makes the environment exactly the lock (a package left over from an earlier install
# cannot hide a missing dependency); the project itself goes in editable, built with the locked
# setuptools so nothing outside the lock is fetched.
install: $(UV) | $(PY)
	$(UV) pip sync --quiet --compile-bytecode --python $(PY) --require-hashes requirements/dev.txt
	$(UV) pip install --quiet --python $(PY) --no-deps --no-build-isolation -e .
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory replay-tools; \
	else echo "npm not found: the WACZ replay test (ReplayWeb.page) will skip"; fi

install-main: $(UV) | $(PY)
	$(UV) pip sync --quiet --compile-bytecode --python $(PY) --require-hashes requirements/main.txt
	$(UV) pip install --quiet --python $(PY) --no-deps --no-build-isolation -e .

demo: install-main
	geo-pipeline demo

# `dg check defs` loads the code location as the code server does ([tool.dg] in pyproject.toml)
# and must need no deployment variable (no GEO_*, no DAGSTER_PG_*). Without DAGSTER_HOME Dagster's
# CLI reads the root's dagster.yaml, the deployed configuration (deploy/dagster/) without storage.
DG_CHECK_DEFS = env -u DAGSTER_HOME $(VENV_ABS)/bin/dg check defs

test: install
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV_ABS)/bin/lint-imports
	$(DG_CHECK_DEFS)
	$(PY) -m pytest -n 2 -m "not slow" $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV_ABS)/bin/lint-imports
	$(DG_CHECK_DEFS)

check-defs: install
	$(DG_CHECK_DEFS)

# Every bench/*.py script; modules whose name starts with "_" (_machine.py, the _scale_*.py
# paths that bench/scale.py loads) are imported by the scripts, not run on their own. A bench
# that fails does not stop the others; the command fails at the end, naming it.
bench: install
	@failed=; for b in bench/[!_]*.py; do echo "== $$b"; $(PY) $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

# sql/schema.sql is generated: after adding a migration, run this and commit both (the schema
# test compares the file with the migrations). SCHEMA_ARGS=--committed: only those at HEAD;
# SCHEMA_ARGS=--check: fail if the file is not current.
schema: install
	$(PY) sql/regenerate_schema.py $(SCHEMA_ARGS)

lock: $(UV)
	UV=$(UV) requirements/lock.sh

lock-check: $(UV)
	UV=$(UV) requirements/lock.sh --check

# ReplayWeb.page (npm `replaywebpage`, pinned with its integrity hash in tools/replay's lock) for
# the replay test of an exported WACZ and for auditors offline (docs/operations.md). `npm ci`
# installs exactly the lock; the package's built ui.js and sw.js carry their dependencies.
REPLAY_UI := tools/replay/node_modules/replaywebpage/ui.js
$(REPLAY_UI): tools/replay/package.json tools/replay/package-lock.json
	cd tools/replay && npm ci --ignore-scripts --no-audit --no-fund
	@touch $@

replay-tools: $(REPLAY_UI)
