"""The services the benchmarks run against, and the environment of the child processes that measure:
PostgreSQL (its own databases, created and dropped here), Redis (db 7, or BENCH_REDIS_DB). Both the whole
run (``driver``) and an A/B run (``ab``) use them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/bench_workflows")
REDIS_DB = int(os.environ.get("BENCH_REDIS_DB", "7"))
INLINE = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}
TASKS_EXECUTOR = {"EXECUTOR": "django_workflows.executors.tasks.TasksExecutor"}
CELERY_EXECUTOR = {"EXECUTOR": "django_workflows.executors.celery.CeleryExecutor",
                   "EXECUTOR_OPTIONS": {"app": "benchmarks.celery_app.app", "queue": "workflows"}}
# Variables the children must not inherit from whoever runs this (a test shell's DATABASE_URL, say).
SCRUBBED = ("DATABASE_URL", "TEST_DATABASE_NAME", "TEST_BROKER", "TEST_REDIS_DB", "TEST_WORKFLOWS_SETTINGS",
            "TEST_Q_CLUSTER_NAME", "TEST_AUDIT_REPLAYS", "BENCH_QUERY_LOG", "BENCH_WORKFLOWS_SETTINGS",
            "BENCH_CONN_MAX_AGE", "DJANGO_SETTINGS_MODULE")


def _postgres_params(url: str) -> dict:
    parsed = urlparse(url)
    return {"host": parsed.hostname or "127.0.0.1", "port": parsed.port or 5432, "user": parsed.username or "postgres",
            "password": parsed.password or None, "dbname": parsed.path.lstrip("/") or "bench_workflows"}


class Postgres:
    """Creates and drops the benchmark's own databases, over a connection to template1."""

    def __init__(self, url: str):
        self.params = _postgres_params(url)
        self.name = self.params["dbname"]
        if self.name in ("test", "postgres", "root", "template0", "template1"):
            raise SystemExit(f"refusing to use the database {self.name!r}: others use it")
        self.dbos_name = f"{self.name}_dbos"

    def _admin(self):
        import psycopg

        params = {k: v for k, v in self.params.items() if k != "dbname" and v is not None}
        return psycopg.connect(dbname="template1", autocommit=True, connect_timeout=3, **params)

    def reachable(self) -> str | None:
        try:
            self._admin().close()
            return None
        except Exception as exc:
            return f"PostgreSQL unreachable at {self.params['host']}:{self.params['port']}: {exc}".strip()

    def create(self) -> None:
        with self._admin() as conn:
            for name in (self.name, self.dbos_name):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')

    def drop(self) -> None:
        with self._admin() as conn:
            for name in (self.name, self.dbos_name):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def url(self, name: str | None = None) -> str:
        p = self.params
        auth = p["user"] + (f":{p['password']}" if p["password"] else "")
        return f"postgresql://{auth}@{p['host']}:{p['port']}/{name or self.name}"


def redis_reachable() -> str | None:
    try:
        import redis

        redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB, socket_timeout=3).ping()
        return None
    except Exception as exc:
        return f"Redis unreachable at 127.0.0.1:6379: {exc}"


def flush_redis() -> None:
    try:
        import redis

        redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB, socket_timeout=3).flushdb()
    except Exception:
        pass


def child_env(database: dict, broker: str, workflows: dict, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(extra or {})
    env.update({"DJANGO_SETTINGS_MODULE": "benchmarks.settings", "PYTHONPATH": str(ROOT),
                "BENCH_WORKFLOWS_SETTINGS": json.dumps(workflows), "TEST_DATABASE_NAME": database["name"],
                "PYTHONUNBUFFERED": "1"})
    if database.get("url"):
        env["DATABASE_URL"] = database["url"]
    if broker == "redis":
        env.update({"TEST_BROKER": "redis", "TEST_REDIS_DB": str(REDIS_DB)})
    return env
