"""Part 4 (cluster throughput) on the Celery executor, to set beside django-q2's (``executor_runs``): the
replays run by one ``celery worker`` with two prefork pool processes (as django-q2's two workers) on the
Redis broker.

    python -m benchmarks.celery_executor --out result.json --work-dir DIR --name NAME [--quick]

``benchmarks.settings`` gives the Celery broker (Redis, ``TEST_REDIS_DB``); the driver gives
DJANGO_WORKFLOWS (the executor, ``services.CELERY_EXECUTOR``).
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from benchmarks.executor_runs import measure  # noqa: E402

POOL_PROCESSES = 2
CELERY_WORKER = ["celery", "-A", "benchmarks.celery_app", "worker", "--queues", "workflows", "--pool", "prefork",
                 "--concurrency", str(POOL_PROCESSES), "--loglevel", "WARNING", "--without-gossip",
                 "--without-mingle", "--without-heartbeat"]


def main() -> None:
    result: dict = {"backend": connection.vendor, "executor": settings.DJANGO_WORKFLOWS,
                    "broker": settings.CELERY_BROKER_URL, "celery_worker": CELERY_WORKER}
    measure("Celery", [CELERY_WORKER], result)


if __name__ == "__main__":
    main()
