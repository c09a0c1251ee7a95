"""Part 4 (cluster throughput) on the tasks executor, to set beside django-q2's (``executor_runs``): the
replays run by two ``manage.py db_worker`` processes (django-tasks-db, one task at a time each, as
django-q2's two workers).

    python -m benchmarks.tasks_executor --out result.json --work-dir DIR --name NAME [--quick]

``benchmarks.settings`` gives the TASKS backend; the driver gives DJANGO_WORKFLOWS (the executor).
"""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from benchmarks.executor_runs import Executor, measure  # noqa: E402

DB_WORKERS = 2
# An idle db_worker looks for a task every 0.1 s (its default, 1 s, would make a replay wait that long).
DB_WORKER_ARGS = ["--interval", "0.1", "--no-startup-delay", "--verbosity", "0"]


class TasksExecutor(Executor):
    """Each run starts with no task rows, and counts those its replays left (one a task run)."""

    counts = ("tasks",)

    def before_run(self) -> None:
        DBTaskResult.objects.all().delete()

    def counted(self) -> dict[str, int]:
        return {"tasks": DBTaskResult.objects.count()}


def main() -> None:
    result: dict = {"backend": connection.vendor, "executor": settings.DJANGO_WORKFLOWS, "tasks": settings.TASKS,
                    "db_workers": DB_WORKERS, "db_worker_args": DB_WORKER_ARGS}
    measure("tasks", [["django", "db_worker", *DB_WORKER_ARGS]] * DB_WORKERS, result, TasksExecutor())


if __name__ == "__main__":
    main()
