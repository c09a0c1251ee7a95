# make test   - checks, migrations, layers, then the unit, integration and conformance tiers (tests/unit,
#               tests/integration, tests/conformance, the example project's tests) on SQLite and, at the same time, on PostgreSQL if reachable:
#               about 3 minutes on two cores
# make test-all - make test, then the system tier (tests/system: worker processes, a browser, load, a fresh
#               project, the demo) on SQLite and on PostgreSQL at once, one test at a time in each: what CI runs
# make demo   - a small end-to-end example on SQLite (its own, smaller install: the package and [demo])
# make docs   - build the documentation site (docs/, mkdocs.yml) into site/ with mkdocs --strict
# make dist   - build the sdist and wheel into dist/, twine check them, install the wheel in a new venv
# make chromium - install Debian's Chromium for the admin's browser test (CI does; needs root)
# make faketime - install Debian's faketime for the clock-skew tests (CI does; needs root)
#
# PYTHON=... VENV=... DJANGO='django>=6,<6.1' picks another interpreter and Django;
# REQUIRE_POSTGRES=1 fails instead of skipping when PostgreSQL is unreachable (CI);
# SKIP_POSTGRES=1 runs SQLite only; SYSTEM_MARK=django_version runs only the system tests marked so (CI's
# Django 6 pass, .ci/run says why); SYSTEM_PATHS='tests/system/test_load.py' runs only those of the system
# tier.

PYTHON ?= python3
VENV ?= .venv
DJANGO ?=
REQUIRE_POSTGRES ?= 0
SKIP_POSTGRES ?= 0
SYSTEM_MARK ?=
POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/test
# The Redis databases of the system passes (the Redis broker's tests flush theirs): CI runs a third pass,
# on Python 3.12, beside these two, on a database of its own.
SQLITE_REDIS_DB ?= 5
POSTGRES_REDIS_DB ?= 6
PY := $(VENV)/bin/python
TEST_ENV := DJANGO_SETTINGS_MODULE=tests.settings
# The SQLite pass is on SQLite even in a shell that exports DATABASE_URL for the PostgreSQL pass.
SQLITE_ENV := env -u DATABASE_URL $(TEST_ENV)
# TIER=system: test-sqlite and test-postgres run the system tier instead of the checks and the fast tiers
# (make test-all). The two tiers together are pytest's testpaths.
TIER ?= fast
FAST_PATHS := tests/unit tests/integration tests/conformance example_project
# SYSTEM_PATHS: what of the system tier a pass runs, as pytest's arguments (CI runs the PostgreSQL pass in
# two parts at once, .ci/run says why). --durations: the slowest system tests are named in every run,
# where CI time goes.
SYSTEM_PATHS ?= tests/system
SYSTEM_ARGS := $(if $(SYSTEM_MARK),-m $(SYSTEM_MARK)) --durations=15 $(SYSTEM_PATHS)
SYSTEM_TITLE := the system tier$(if $(SYSTEM_MARK), (the tests marked $(SYSTEM_MARK)))

.PHONY: test test-all test-sqlite test-postgres chaos chaos-sqlite chaos-postgres demo demo-smoke clean bench dist docs chromium faketime

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]' $(if $(DJANGO),'$(DJANGO)')
	@touch $@

# The demo needs neither the test tools nor a browser driver.
$(VENV)/.installed-demo: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[demo]' $(if $(DJANGO),'$(DJANGO)')
	@touch $@

# The SQLite and PostgreSQL passes at once, a core each; -k: both run to their end whatever the other
# does, and make fails if either failed. Each pass's output is printed whole when it ends.
test:
	@echo "== the SQLite and PostgreSQL passes run at once: each one's output follows when it ends"
	@$(MAKE) --no-print-directory -j2 -k --output-sync=target test-sqlite test-postgres

# The system tier after the fast tiers, on SQLite and on PostgreSQL at once, each pass's output printed whole
# when it ends. The two share nothing: each has a Redis database of its own (SQLITE_REDIS_DB and
# POSTGRES_REDIS_DB), each Celery test a queue of its own, each worker a log and a directory of its own.
# Most of their time is spent waiting for worker processes, so two passes fit on two cores (8 minutes at
# once, 18 one after the other).
test-all: test
	@$(MAKE) --no-print-directory -j2 -k --output-sync=target test-sqlite test-postgres TIER=system

test-sqlite: $(VENV)/.installed
ifeq ($(TIER),system)
	@echo "== pytest on SQLite: $(SYSTEM_TITLE)"
	$(SQLITE_ENV) TEST_REDIS_DB=$(SQLITE_REDIS_DB) $(PY) -m pytest $(SYSTEM_ARGS)
else
	@$(PY) -c "import django, sys; print(f'== Python {sys.version.split()[0]}, Django {django.get_version()}')"
	$(SQLITE_ENV) $(PY) -m django check --fail-level WARNING
	$(SQLITE_ENV) $(PY) -m django makemigrations --check --dry-run
	@echo "== the package's layers (pyproject.toml, [tool.importlinter])"
	$(VENV)/bin/lint-imports
	@echo "== types (mypy)"
	$(VENV)/bin/mypy
	@echo "== pytest on SQLite: the unit, integration and conformance tiers"
	$(SQLITE_ENV) $(PY) -m pytest $(FAST_PATHS)
endif

test-postgres: $(VENV)/.installed
	@url="$${DATABASE_URL:-$(POSTGRES_URL)}"; \
	if [ "$(SKIP_POSTGRES)" = "1" ]; then echo "== PostgreSQL pass skipped (SKIP_POSTGRES=1)"; exit 0; fi; \
	if ! $(PY) -c "import psycopg, sys; u = sys.argv[1].rsplit('/', 1)[0] + '/postgres'; psycopg.connect(u, connect_timeout=3).close()" "$$url" 2>/dev/null; then \
		if [ "$(REQUIRE_POSTGRES)" = "1" ]; then echo "== PostgreSQL is required but unreachable at $$url"; exit 1; fi; \
		echo "== SKIPPING the PostgreSQL pass: no PostgreSQL reachable at $$url (set DATABASE_URL to use another)"; exit 0; \
	fi; \
	if [ "$(TIER)" = "system" ]; then \
		echo "== pytest on PostgreSQL ($$url): $(SYSTEM_TITLE)"; \
		DATABASE_URL="$$url" TEST_REDIS_DB=$(POSTGRES_REDIS_DB) $(PY) -m pytest $(SYSTEM_ARGS); \
	else \
		echo "== pytest on PostgreSQL ($$url): the unit, integration and conformance tiers"; \
		DATABASE_URL="$$url" $(TEST_ENV) $(PY) -m django check --fail-level WARNING && \
		DATABASE_URL="$$url" $(PY) -m pytest $(FAST_PATHS); \
	fi

# make chaos - the chaos test of issue 8 (about 3 minutes, not part of make test): 500 instances through
#              workflows_worker commands whose processes are SIGKILLed at random every 0.5 to 2 s; on SQLite
#              with the ORM broker and one command, then on a private PostgreSQL server (started, restarted
#              mid-run and removed by tests/chaos_postgres.sh) with the Redis broker (127.0.0.1:6379 db 8)
#              and two commands, one of them 90 s ahead (libfaketime), and a worker connection cut every
#              1 to 3 s. CHAOS_SEED=... replays a run's plan.
# The two chaos runs share nothing (a SQLite file of their own and the ORM broker; a PostgreSQL server of
# their own and Redis): `make -j2 chaos` runs them at once, as CI does.
chaos: chaos-sqlite chaos-postgres

chaos-sqlite: $(VENV)/.installed
	@echo "== chaos on SQLite: the ORM broker, one worker command"
	env -u DATABASE_URL TEST_REDIS_DB=8 $(PY) -m pytest -m chaos -s -p no:cacheprovider tests/system/test_chaos.py

chaos-postgres: $(VENV)/.installed
	@echo "== chaos on PostgreSQL: the Redis broker, two worker commands, a database restart"
	TEST_REDIS_DB=8 tests/chaos_postgres.sh $(PY) -m pytest -m chaos -s -p no:cacheprovider tests/system/test_chaos.py

DEMO_ARGS ?=

demo: $(VENV)/.installed-demo
	@# exec: Ctrl+C reaches the demo alone, which stops its children; make has nothing left to interrupt.
	cd example_project && ../$(PY) manage.py migrate -v 0 && DEBUG=$${DEBUG:-1} exec ../$(PY) manage.py demo $(DEMO_ARGS)

# What CI runs: the demo on a fresh SQLite file, exiting once every instance settled.
demo-smoke: $(VENV)/.installed-demo
	rm -f example_project/demo-smoke.sqlite3*
	SQLITE_PATH=$(CURDIR)/example_project/demo-smoke.sqlite3 $(MAKE) demo DEMO_ARGS="--exit-when-settled --port 0"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache example_project/db.sqlite3* dist site

# The site needs only MkDocs and its plugins: the API reference reads the package's source, not an import.
$(VENV)/.installed-docs: docs/requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r docs/requirements.txt
	@touch $@

# --strict: a broken link, a missing anchor or an API reference that does not resolve fails the build.
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# What `pip install /path/to/checkout` and a PyPI upload would get: built, checked, installed, imported.
dist: $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check build twine
	rm -rf dist
	$(PY) -m build --outdir dist . > /dev/null
	$(PY) -m twine check --strict dist/*
	$(PY) scripts/check_wheel.py dist/*.whl
	rm -rf dist/venv && $(PYTHON) -m venv dist/venv
	dist/venv/bin/python -m pip install -q --disable-pip-version-check dist/*.whl
	cd dist && venv/bin/python -c "import django_workflows, sys; print('== installed', django_workflows.__version__, 'from', django_workflows.__file__)"

# Debian's Chromium, which tests/system/test_admin_browser.py drives through Playwright.
chromium:
	@test -x /usr/bin/chromium || (apt-get update -q && apt-get install -y -q chromium)

# make faketime - install Debian's faketime for the clock-skew tests (CI does; needs root)
faketime:
	@ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q faketime)

# make bench          - the benchmarks of issue 7 (~20 minutes): prints the table, writes benchmarks/REPORT.md
#                       and benchmarks/report.png; SQLite, and PostgreSQL (BENCH_POSTGRES_URL, default
#                       postgres://postgres@127.0.0.1:5432/bench_workflows, created and dropped) with the ORM
#                       and the Redis broker (127.0.0.1:6379 db 7, or BENCH_REDIS_DB) when reachable; part 8,
#                       the thundering herd, through two workflows_worker commands on PostgreSQL.
# make bench QUICK=1  - small counts, one run each (CI, under 3 minutes): writes benchmarks/quick/REPORT.md;
#                       reports goals, asserts none.
# make bench SCALE=1  - only the scale part (benchmarks/scale.py, ~15 minutes): PostgreSQL's bench_scale
#                       (created and dropped) loaded with 1,000,000 instances, 10,000,000 steps and
#                       1,000,000 events, the instances tagged and half bound to a subject; the admin's
#                       and the API's pages (their tag and subject filters too), the CLI's list, the
#                       wake-up query, the sweeper and retention timed and explained; writes
#                       benchmarks/SCALE.md.
#                       SCALE_INSTANCES, SCALE_STEPS, SCALE_EVENTS load less.
# make bench BASE=<commit> - A/B: parts 2-5 of HEAD and of that commit, interleaved in pairs, each figure
#                       with the ratio HEAD/base and its spread; the base's package is built in a virtualenv
#                       of its own under BENCH_WORK_DIR (default /tmp/django-workflows-bench), once per
#                       commit. Writes benchmarks/AB.md, its section of REPORT.md and a history entry with
#                       the pairs (about 15 minutes; with QUICK=1 about 2 minutes a database, in benchmarks/quick/).
QUICK ?=
SCALE ?=
BASE ?=
bench: $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check -r benchmarks/requirements.txt || \
		echo "== could not install benchmarks/requirements.txt: the DBOS rows will say why"
	$(PY) -m benchmarks $(if $(filter 1 yes true,$(QUICK)),--quick) $(if $(filter 1 yes true,$(SCALE)),--scale) $(if $(BASE),--base $(BASE))
