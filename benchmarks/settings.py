"""Settings for the benchmarks: the benchmark app and one database.

The database (the same variables as ``tests/workers.py`` uses):

- ``DATABASE_URL=postgres://...``: PostgreSQL; ``TEST_DATABASE_NAME`` replaces the database name
  (default ``bench_workflows``);
- otherwise SQLite at the path ``TEST_DATABASE_NAME``, file-backed, with the test suite's OPTIONS
  (WAL, ``synchronous=NORMAL``, ``BEGIN IMMEDIATE``); ``BENCH_SQLITE_SYNCHRONOUS=FULL`` measures the
  setting the install page (docs/install.md) recommends.

``TEST_BROKER=redis`` switches django-q2 to Redis (``TEST_REDIS_DB``, default 7); the ORM broker on
the same database is the default. ``BENCH_WORKFLOWS_SETTINGS`` (JSON) is ``DJANGO_WORKFLOWS``.
``BENCH_QUERY_LOG=<dir>`` counts every SQL statement of every process (``benchmarks/querylog.py``).
Connections persist (``CONN_MAX_AGE`` 60 s with health checks) unless ``BENCH_CONN_MAX_AGE`` says otherwise.
"""

import importlib.util
import json
import os
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

# The ORM broker's path in the package measured: an A/B run's base may keep it where it stood before the
# package's folders by layer (django_workflows.broker). Found on disk: the package is not imported here.
_PACKAGE = importlib.util.find_spec("django_workflows")
_ORM_BROKER = ("django_workflows.executors.broker.ORMBroker"
               if _PACKAGE is None or _PACKAGE.submodule_search_locations is None or any(
                   os.path.exists(os.path.join(location, "executors", "broker.py"))
                   for location in _PACKAGE.submodule_search_locations)
               else "django_workflows.broker.ORMBroker")

import django

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "benchmarks.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_workflows",  # before django_q, as the install page says
    "django_q",
    "rest_framework",
    "rest_framework.authtoken",
    # The tasks executor's configuration (benchmarks/tasks_executor.py); Django 5.2 has the framework from
    # the django-tasks backport.
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),
    "django_tasks_db",
    "benchmarks.apps.BenchmarksConfig",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, got {url!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
    }


SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    # NORMAL by default, as in the test suite; BENCH_SQLITE_SYNCHRONOUS=FULL measures the install page's setting.
    "init_command": "PRAGMA journal_mode=WAL; "
                    f"PRAGMA synchronous={os.environ.get('BENCH_SQLITE_SYNCHRONOUS', 'NORMAL')};",
}

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": database_from_url(os.environ["DATABASE_URL"])}
    DATABASES["default"]["NAME"] = os.environ.get("TEST_DATABASE_NAME") or "bench_workflows"
    # As the production page configures it: psycopg prepares the engine's hot statements once a connection
    # has run them 5 times (store/prepared.py). BENCH_PREPARE_THRESHOLD=none measures Django's default,
    # every statement planned at every call; BENCH_SERVER_SIDE_BINDING=1 binds all of Django's on the server.
    options = {}
    threshold = os.environ.get("BENCH_PREPARE_THRESHOLD", "5")
    if threshold != "none":
        options["prepare_threshold"] = int(threshold)
    if os.environ.get("BENCH_SERVER_SIDE_BINDING") == "1":
        options["server_side_binding"] = True
    DATABASES["default"]["OPTIONS"] = options
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("TEST_DATABASE_NAME")
            or str(Path(tempfile.gettempdir()) / "bench-workflows.sqlite3"),
            "OPTIONS": SQLITE_OPTIONS,
        }
    }

# Persistent connections, as a production site would run: with Django's default CONN_MAX_AGE = 0,
# django-q2 opens a new connection for every poll of its queue and every task (PROFILES.md).
# BENCH_CONN_MAX_AGE=0 measures that default.
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("BENCH_CONN_MAX_AGE", "60"))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# The recommended Q_CLUSTER (docs/how-to/production-postgresql.md), 2 workers per machine.
Q_CLUSTER = {
    "name": "bench",
    "workers": 2,
    "timeout": 900,
    "retry": 960,
    "ack_failures": True,
    "save_limit": -1,
    "queue_limit": 8,
    "poll": 0.1,
    "catch_up": False,
}
if os.environ.get("TEST_BROKER") == "redis":
    Q_CLUSTER["redis"] = {"host": "127.0.0.1", "port": 6379, "db": int(os.environ.get("TEST_REDIS_DB", "7"))}
else:
    Q_CLUSTER["orm"] = "default"
    # Sleeps while the queue is empty instead of polling it (django_workflows.executors.broker).
    Q_CLUSTER["broker_class"] = _ORM_BROKER

# The tasks executor's backend, on the benchmark's database: its replays are rows of django-tasks-db's
# table that db_worker runs.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

# The Celery executor's broker (benchmarks/celery_app.py): Redis, in the database django-q2's Redis broker
# would use; the other settings are the how-to's (docs/how-to/celery.md). Celery's Django fix-up closes
# every database connection after every task unless CELERY_DB_REUSE_MAX is set: set, the connections
# persist for CONN_MAX_AGE as django-q2's do. BENCH_CELERY_DB_REUSE_MAX=0 measures Celery's default.
CELERY_BROKER_URL = f"redis://127.0.0.1:6379/{int(os.environ.get('TEST_REDIS_DB', '7'))}"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_DB_REUSE_MAX = int(os.environ.get("BENCH_CELERY_DB_REUSE_MAX", "100000")) or None

DJANGO_WORKFLOWS = json.loads(os.environ.get("BENCH_WORKFLOWS_SETTINGS") or "{}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
