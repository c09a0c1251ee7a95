"""A small project using django_workflows. SQLite by default (WAL, as the app recommends)."""

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one made for this clone on its first run and kept beside
    the project (git ignores it): never a key printed in a public repository."""
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    kept = BASE_DIR / ".secret_key"
    try:
        return kept.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        # Written whole beside it, then linked into place: two processes starting at once keep the first
        # one's key, and neither can read the file half-written.
        written = kept.with_name(f".secret_key.{secrets.token_hex(8)}")
        written.write_text(key)
        try:
            os.link(written, kept)
        except FileExistsError:
            return kept.read_text().strip()
        finally:
            written.unlink()
        return key


SECRET_KEY = _secret_key()
# Off unless asked for: `make demo` turns it on (DEBUG=1) for its local server.
DEBUG = os.environ.get("DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "example_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
    "examples",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # The admin's Approve, Reject and Terminate buttons cannot be framed by another site (X-Frame-Options: DENY).
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
STATIC_URL = "static/"


def _database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, got {url!r}")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        # The engine's statements prepared (docs/how-to/production-postgresql.md): leave it out behind a
        # pooler in transaction mode that drops prepared statements.
        "OPTIONS": {"prepare_threshold": 5},
    }


# SQLite by default (WAL and BEGIN IMMEDIATE, so the web server and the worker share the file);
# DATABASE_URL=postgres://... for PostgreSQL.
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": _database_from_url(os.environ["DATABASE_URL"])}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
            },
        }
    }

# The ORM broker on the same database by default; REDIS_URL=redis://host:port/db for Redis.
Q_CLUSTER = {
    "name": "example",
    "workers": 2,
    "timeout": 900,
    "retry": 960,
    "ack_failures": True,
    "save_limit": -1,
    "queue_limit": 8,
    "poll": 0.1,
    "catch_up": False,
    # Q_LOG_LEVEL=WARNING leaves out the cluster's lines per task (the demo runs its worker so).
    "log_level": os.environ.get("Q_LOG_LEVEL", "INFO"),
}
if os.environ.get("REDIS_URL"):
    _redis = urlparse(os.environ["REDIS_URL"])
    Q_CLUSTER["redis"] = {"host": _redis.hostname or "127.0.0.1", "port": _redis.port or 6379,
                          "db": int(_redis.path.lstrip("/") or 0), "password": _redis.password}
else:
    Q_CLUSTER["orm"] = "default"
    # Sleeps while the queue is empty instead of polling it (django_workflows.executors.broker).
    Q_CLUSTER["broker_class"] = "django_workflows.executors.broker.ORMBroker"

DJANGO_WORKFLOWS = {
    # The provider's signing secret from the environment; else one derived from this clone's SECRET_KEY,
    # so no two clones share it and none is in the repository.
    "WEBHOOK_SECRETS": {"payment-race": os.environ.get("PAYMENT_WEBHOOK_SECRET") or hmac.new(
        SECRET_KEY.encode(), b"payment-race webhook", hashlib.sha256).hexdigest()},
}
