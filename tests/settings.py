"""Settings for the test suite: SQLite (WAL, file-backed) by default, PostgreSQL from DATABASE_URL."""

import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import django

# The example project's app (example_project/examples) is tested with the rest; every process that
# uses these settings (worker subprocesses, manage.py check) finds it.
EXAMPLE_PROJECT = str(Path(__file__).resolve().parent.parent / "example_project")
if EXAMPLE_PROJECT not in sys.path:
    sys.path.append(EXAMPLE_PROJECT)

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# A fast hasher: the tests create users by the hundred, and PBKDF2's million iterations cost up to a
# second each on a loaded two-core machine; the suite checks permissions and sessions, not the hash.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_workflows",  # before django_q, as docs/install.md says
    "django_q",
    "rest_framework",
    "rest_framework.authtoken",
    # The tasks executor's database backend; Django 5.2 has the framework from the django-tasks backport.
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),
    "django_tasks_db",
    "tests.testapp.apps.TestAppConfig",
    "examples",  # example_project/examples, on the path through pytest's pythonpath
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


SQLITE_DIR = Path(os.environ.get("TEST_SQLITE_DIR", tempfile.gettempdir()))
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    # Worker subprocesses of a test may wait less for the write lock (TEST_SQLITE_TIMEOUT).
    "timeout": float(os.environ.get("TEST_SQLITE_TIMEOUT", 20)),
    # NORMAL, not the recommended FULL: a test database need not survive a power loss.
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": database_from_url(os.environ["DATABASE_URL"])}
    if os.environ.get("TEST_DATABASE_NAME"):
        # A worker subprocess started by a test: use that test's database.
        DATABASES["default"]["NAME"] = os.environ["TEST_DATABASE_NAME"]
    if os.environ.get("TEST_CONN_MAX_AGE"):
        DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ["TEST_CONN_MAX_AGE"])
    # The production page's setting: psycopg prepares the engine's hot statements (store/prepared.py).
    # TEST_PREPARE_THRESHOLD=none runs them as Django's default does, planned at every call.
    threshold = os.environ.get("TEST_PREPARE_THRESHOLD", "5")
    if threshold != "none":
        DATABASES["default"]["OPTIONS"] = {"prepare_threshold": int(threshold)}
else:
    # File-backed, so threads and worker subprocesses share one database.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SQLITE_DIR / f"django-workflows-{os.getpid()}.sqlite3"),
            "OPTIONS": SQLITE_OPTIONS,
            "TEST": {"NAME": str(SQLITE_DIR / f"django-workflows-test-{os.getpid()}.sqlite3")},
        }
    }
    if os.environ.get("TEST_DATABASE_NAME"):
        DATABASES["default"]["NAME"] = os.environ["TEST_DATABASE_NAME"]

# The recommended django-q2 settings (docs/how-to/production-postgresql.md). TEST_BROKER=redis switches
# to the Redis broker for the worker tests that run against it.
Q_CLUSTER = {
    "name": os.environ.get("TEST_Q_CLUSTER_NAME", "tests"),
    "workers": 2,
    "timeout": 900,
    "retry": 960,
    "ack_failures": True,
    "save_limit": -1,
    "queue_limit": 8,
    "poll": 0.05,
    "catch_up": False,
}
if os.environ.get("TEST_BROKER") == "redis":
    Q_CLUSTER["redis"] = {"host": "127.0.0.1", "port": 6379, "db": int(os.environ.get("TEST_REDIS_DB", "5"))}
else:
    Q_CLUSTER["orm"] = "default"
    # Sleeps while the queue is empty instead of polling it (django_workflows.executors.broker).
    Q_CLUSTER["broker_class"] = "django_workflows.executors.broker.ORMBroker"

# The tasks executor's tests enqueue replays on "workflows", a django-tasks-db backend with a queue of
# its own, as a project that keeps the default backend for its other tasks would.
tasks_framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
TASKS = {
    "default": {"BACKEND": f"{tasks_framework}.backends.immediate.ImmediateBackend"},
    "workflows": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["workflows"]},
}

# The Celery executor's apps (tests/celery_app.py) read these, as a project's celery.py reads its settings;
# each app names its own broker; the rest are Celery's defaults.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# The refund workflow (tests/testapp) takes its provider's webhooks: a project declaring webhook types
# names their secret (system check W112). Tests of the webhook endpoint set their own.
# Large values (LARGE_VALUE_THRESHOLD) are written to the default storage: a folder of this run's, never
# the working directory.
MEDIA_ROOT = tempfile.mkdtemp(prefix="django-workflows-test-media-")
DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": "whsec_test_refund_provider_secret"}}
if os.environ.get("TEST_WORKFLOWS_SETTINGS"):
    import json

    DJANGO_WORKFLOWS = json.loads(os.environ["TEST_WORKFLOWS_SETTINGS"])
