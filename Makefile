# Development tasks for django-durable-jobs.
#
# Every target sets up what it needs: it creates .venv with `python3 -m venv` when
# it is missing and installs the package (editable) with the extras it uses. The
# install reruns whenever pyproject.toml changes. The test targets also install
# Chromium and gettext when they are missing (see install-system), and test-mysql what
# building the MariaDB/MySQL driver needs (see install-system-mysql).
#
#   make demo             run the example project against a real worker (SQLite)
#   make test             run the test suite (SQLite; DATABASE_URL picks another database)
#   make test-postgres    run the test suite on PostgreSQL at 127.0.0.1:5432
#   make test-mysql       run the test suite on MariaDB (or MySQL) at 127.0.0.1:3306
#   make lint             ruff (lint and formatting) and mypy
#   make migrations-check fail if a model change has no migration
#   make docs             build the HTML documentation, warnings as errors
#   make dist             build the sdist and the wheel into dist/, and check them (twine)
#   make install          only set up .venv with the test extra (install-dev: the dev extra)
#   make test-matrix      tox: Python 3.12 + Django 6.0 and 3.13 + Django 6.1, SQLite and
#                         PostgreSQL
#   make test-matrix-mysql  tox: MariaDB with Django 5.2, 6.0 and 6.1
#   make test-minimum     tox: the oldest versions pyproject.toml declares, SQLite and PostgreSQL
#   make install-system   install Debian's chromium and gettext for the tests (apt-get, as root)
#   make install-system-mysql  install what building mysqlclient needs (libmariadb-dev,
#                         pkg-config, gcc, the Python headers; apt-get, as root)
#
# Extra pytest arguments: make test PYTEST_ARGS="-k lease -x"

PYTHON ?= python3
VENV ?= .venv
PYTEST_ARGS ?=
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/durable_jobs
MYSQL_URL ?= mysql://root@127.0.0.1:3306/durable_jobs
# tests/browser launches this binary (Debian's chromium package) through Playwright.
CHROMIUM := /usr/bin/chromium
# GNU gettext's msgfmt (Debian's gettext package), for tests/test_admin_i18n.py.
MSGFMT := /usr/bin/msgfmt
SYSTEM_PACKAGES := $(CHROMIUM):chromium $(MSGFMT):gettext
# mysqlclient (the mysql extra) compiles against MariaDB Connector/C, found through
# pkg-config. The Python headers are checked apart: their path depends on the interpreter.
MYSQL_BUILD_PACKAGES := /usr/bin/pkg-config:pkg-config /usr/include/mariadb/mysql.h:libmariadb-dev \
	/usr/bin/gcc:gcc

VENV_DIR := $(abspath $(VENV))
BIN := $(VENV_DIR)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Stamps live inside the virtualenv, so deleting .venv also forgets the installs.
STAMP_DEMO := $(VENV_DIR)/.durable-jobs-demo.stamp
STAMP_TEST := $(VENV_DIR)/.durable-jobs-test.stamp
STAMP_DEV := $(VENV_DIR)/.durable-jobs-dev.stamp
STAMP_MYSQL := $(VENV_DIR)/.durable-jobs-mysql.stamp
STAMP_DOCS := $(VENV_DIR)/.durable-jobs-docs.stamp
DOCS_REQUIREMENTS := $(wildcard docs/requirements.txt)

.DEFAULT_GOAL := help
# tox needs python3.12 and python3.13 on PATH. Where one does not run (missing, or a pyenv
# shim that no selected version backs), the newest pyenv build of it is put first.
TOX_PYTHONS = $(shell for v in 3.12 3.13; do \
	python$$v -c '' 2>/dev/null && continue; \
	d=$$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/$$v.* 2>/dev/null | sort -V | tail -n 1); \
	[ -n "$$d" ] && printf '%s/bin:' "$$d"; done)
TOX = PATH="$(TOX_PYTHONS)$$PATH" POSTGRES_URL=$(POSTGRES_URL) MYSQL_URL=$(MYSQL_URL) $(BIN)/tox
# The fault suite (tests/faults: killed workers, a restarted database) runs in `make test`,
# `make test-postgres` and `make test-mysql` (Python 3.11, Django 5.2); the other legs
# leave it out for time.
MATRIX_PYTEST_ARGS ?= -m "not faults"
# MariaDB's tox legs run in test-matrix-mysql, not in test-matrix: CI runs every step one
# after the other and must stay well inside its time limit, and it already runs the whole
# suite on MariaDB (test-mysql, fault suite included).
MATRIX_ENVS := py312-django60-sqlite,py312-django60-postgres,py313-django61-sqlite,py313-django61-postgres
MATRIX_MYSQL_ENVS := py311-django52-mysql,py312-django60-mysql,py313-django61-mysql
MINIMUM_ENVS := py311-minimum-sqlite,py311-minimum-postgres

.PHONY: help install install-dev install-system install-system-mysql demo test test-postgres test-mysql test-matrix test-matrix-mysql test-minimum lint migrations-check docs dist clean

help:
	@echo "Targets: demo test test-postgres test-mysql test-matrix test-matrix-mysql test-minimum lint migrations-check docs dist install install-dev install-system install-system-mysql clean"
	@echo "Each one creates $(VENV) and installs what it needs on first use."
	@echo "Pass pytest arguments with PYTEST_ARGS, e.g. make test PYTEST_ARGS='-x -k lease'."

# The venv's own pip (23 or newer) installs everything here; not upgrading it keeps a
# first `make demo` from downloading pip.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV_DIR)

# The demo extra: only what example_project needs (django-environ, the Tasks backport).
# --no-compile: Python compiles what the demo imports when it first imports it, rather
# than all of Django at install time.
$(STAMP_DEMO): pyproject.toml | $(BIN)/python
	$(PIP) install --no-compile -e ".[demo]"
	touch $@

# The test extra: pytest, pytest-django, django-environ, psycopg, ... (it covers the demo).
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(PIP) install -e ".[test]"
	touch $@ $(STAMP_DEMO)

# The dev extra (ruff, mypy, django-stubs, tox, sphinx) includes the test extra.
$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(PIP) install -e ".[dev]"
	touch $@ $(STAMP_TEST) $(STAMP_DEMO)

# The test and mysql extras; mysqlclient compiles, so its build dependencies come first.
$(STAMP_MYSQL): pyproject.toml | $(BIN)/python install-system-mysql
	$(PIP) install -e ".[test,mysql]"
	touch $@ $(STAMP_TEST) $(STAMP_DEMO)

install: $(STAMP_TEST)

install-dev: $(STAMP_DEV)

# Two Debian packages the test suite needs: chromium (tests/browser drives it, a browser
# kept up to date with the system rather than one downloaded by `playwright install`)
# and gettext (the admin's translation tests run makemessages and compilemessages).
# Nothing to do when both are there; otherwise apt-get, which needs root. Without root or
# apt-get it only warns, so the rest of the suite still runs (the tests that need them
# then fail, saying why).
install-system:
	@missing=""; \
	for pair in $(SYSTEM_PACKAGES); do \
		[ -x "$${pair%%:*}" ] || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -z "$$missing" ]; then \
		echo "System packages: chromium ($(CHROMIUM)) and gettext ($(MSGFMT))"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
		echo "Missing Debian packages for the tests:$$missing." >&2; \
		echo "Install them as root: sudo make install-system (or sudo apt-get install$$missing)." >&2; \
	elif ! command -v apt-get >/dev/null; then \
		echo "Missing for the tests, and there is no apt-get:$$missing. Install them there." >&2; \
	else \
		echo "Installing with apt-get:$$missing"; \
		apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing && \
		test -x $(CHROMIUM) && test -x $(MSGFMT); \
	fi

# What building mysqlclient needs, from Debian's packages: MariaDB Connector/C's headers,
# pkg-config, gcc and the headers of the Python .venv is built on. Nothing to do when
# mysqlclient already imports in .venv or all of them are there; otherwise apt-get, as
# root, as install-system does. Without root or apt-get it only warns, and pip then says
# what the build lacks (on other systems, see docs/howto/mysql.rst).
install-system-mysql: | $(BIN)/python
	@missing=""; \
	if ! $(BIN)/python -c 'import MySQLdb' 2>/dev/null; then \
		for pair in $(MYSQL_BUILD_PACKAGES); do \
			[ -e "$${pair%%:*}" ] || missing="$$missing $${pair#*:}"; \
		done; \
		include=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("include"))'); \
		if [ ! -e "$$include/Python.h" ]; then \
			case "$$include" in \
				/usr/include/python3*) missing="$$missing $${include#/usr/include/}-dev";; \
				*) echo "No Python headers in $$include: mysqlclient cannot build." >&2;; \
			esac; \
		fi; \
	fi; \
	if [ -z "$$missing" ]; then \
		echo "Build dependencies of mysqlclient: present"; \
	elif [ "$$(id -u)" -ne 0 ]; then \
		echo "Missing Debian packages to build mysqlclient:$$missing." >&2; \
		echo "Install them as root: sudo make install-system-mysql (or sudo apt-get install$$missing)." >&2; \
	elif ! command -v apt-get >/dev/null; then \
		echo "Missing to build mysqlclient, and there is no apt-get:$$missing. Install them there." >&2; \
	else \
		echo "Installing with apt-get:$$missing"; \
		apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

demo: $(STAMP_DEMO)
	cd example_project && $(BIN)/python manage.py demo

# `python -m pytest` (not `pytest`) puts the repository root on sys.path, so the
# `tests` package and its settings import.
test: $(STAMP_TEST) install-system
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-postgres: $(STAMP_TEST) install-system
	DATABASE_URL=$(POSTGRES_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

# The URL's user must be allowed to create databases: the tests run in test_<name>, which
# Django creates (in utf8mb4, see tests/settings.py) and drops. The database the URL names
# need not exist.
test-mysql: $(STAMP_MYSQL) install-system
	DATABASE_URL=$(MYSQL_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

# One tox environment after another: the postgres ones share one test database.
test-matrix: $(STAMP_DEV) install-system
	$(TOX) -e $(MATRIX_ENVS) -- $(MATRIX_PYTEST_ARGS) $(PYTEST_ARGS)

# install-system-mysql: tox builds mysqlclient in each MariaDB leg.
test-matrix-mysql: $(STAMP_DEV) install-system install-system-mysql
	$(TOX) -e $(MATRIX_MYSQL_ENVS) -- $(MATRIX_PYTEST_ARGS) $(PYTEST_ARGS)

test-minimum: $(STAMP_DEV) install-system
	$(TOX) -e $(MINIMUM_ENVS) -- $(MATRIX_PYTEST_ARGS) $(PYTEST_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy durable_jobs

migrations-check: $(STAMP_TEST)
	$(BIN)/python -m django makemigrations --check --dry-run --settings=tests.settings

# Sphinx extensions beyond the dev extra are listed in docs/requirements.txt.
$(STAMP_DOCS): $(STAMP_DEV) $(DOCS_REQUIREMENTS)
	$(if $(DOCS_REQUIREMENTS),$(PIP) install -r $(DOCS_REQUIREMENTS))
	touch $@

docs: $(STAMP_DOCS)
	$(BIN)/sphinx-build -W -b html docs docs/_build/html

# The license must be in both: a legal review starts there.
dist: $(STAMP_DEV)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/python -c "import sys, tarfile, zipfile, glob; \
	  wheel = zipfile.ZipFile(glob.glob('dist/*.whl')[0]).namelist(); \
	  sdist = tarfile.open(glob.glob('dist/*.tar.gz')[0]).getnames(); \
	  missing = [n for n, names in (('wheel', wheel), ('sdist', sdist)) \
	             if not any(p.endswith('/LICENSE') for p in names)]; \
	  sys.exit(f'no LICENSE in the {missing}') if missing else print('LICENSE in the wheel and the sdist')"

# Removes build output and the example database; keeps .venv.
clean:
	rm -rf docs/_build build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -f example_project/db.sqlite3 example_project/db.sqlite3-wal example_project/db.sqlite3-shm
