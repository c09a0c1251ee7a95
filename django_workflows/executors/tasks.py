"""Replays as tasks of Django's tasks framework: ``django.tasks`` from Django 6, the ``django-tasks``
backport on Django 5.2.

One replay is one task whose only argument is the instance's primary key
(``django_workflows.executors.replay_task.run_replay``), enqueued on the
backend alias and queue named by the executor's options. The backend's own
worker runs it (``manage.py db_worker`` for django-tasks-db's
``DatabaseBackend``); ``workflows_worker --no-cluster`` beside it fires the
timers and runs the sweeper, which enqueue replays through this executor too.

With the database backend on the workflow tables' own database, the task row
is written inside the transaction that made the instance runnable, so it
exists exactly when that change commits (as with django-q2's ORM broker);
with any other backend the task is enqueued once the transaction commits.
A lost or duplicated task is harmless either way: the sweeper enqueues again
the replays of instances left queued, and the lease turns a duplicate into a
no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from functools import cached_property

from django.core.checks import Warning
from django.core.exceptions import ImproperlyConfigured
from django.db import router

from django_workflows.errors import WorkflowConfigError
from django_workflows.shared import routing
from django_workflows.executors.base import BaseExecutor, by_queue
from django_workflows.executors.tasks_framework import PART, framework_class, tasks_framework


class TasksExecutor(BaseExecutor):
    """Enqueues each replay as a task on ``backend`` (an alias of ``TASKS``) and ``queue_name``, for the
    backend's worker.

    The backend must run its tasks in another process: ``ImmediateBackend`` would run each replay inside
    the commit that enqueued it, and ``DummyBackend`` never runs one (check W201).
    """

    worker_command = "manage.py db_worker, django-tasks-db's"

    def __init__(self, *, backend: str = "default", queue_name: str = "default"):
        super().__init__(backend=backend, queue_name=queue_name)
        self.framework = tasks_framework()
        invalid_task = self.invalid_task = framework_class(self.framework, "exceptions.TaskException")
        # Refused here, before an instance is written that no task could ever be enqueued for: the
        # alias must name a backend of TASKS, and that backend must accept the queue.
        try:
            from django_workflows.executors.replay_task import run_replay

            self.task = run_replay.using(backend=backend, queue_name=queue_name)
        except (ImproperlyConfigured, invalid_task) as exc:
            raise WorkflowConfigError(
                f"{PART} cannot enqueue on the task backend {backend!r}, queue {queue_name!r}: {exc}"
            ) from exc

    @property
    def backend(self):
        return self.task.get_backend()

    @cached_property
    def queue_database(self) -> str | None:
        """The database the backend writes its tasks to, if it is django-tasks-db's ``DatabaseBackend``."""
        try:
            from django_tasks_db import DatabaseBackend
            from django_tasks_db.models import DBTaskResult
        except (ImportError, RuntimeError):  # not installed, or not in INSTALLED_APPS (its own check says)
            return None
        if not isinstance(self.backend, DatabaseBackend):
            return None
        return router.db_for_write(DBTaskResult)

    @property
    def enqueues_in_transaction(self) -> bool:  # type: ignore[override]
        from django_workflows.models import Instance

        return self.queue_database == router.db_for_write(Instance)

    def enqueue_replay(self, instance_pk: int) -> None:
        [(queue, _)] = by_queue([instance_pk]).items()
        self.task_for(queue).enqueue(instance_pk)

    def task_for(self, queue: str) -> Any:
        """The replay task on the task queue of a workflow queue: the default queue's on ``queue_name``,
        another's on the task queue of its name, which the backend must list (its ``QUEUES``) and a
        worker started for it takes from (``db_worker --queue-name heavy``)."""
        if queue == routing.DEFAULT_QUEUE:
            return self.task
        try:
            return self.task.using(queue_name=queue)
        except self.invalid_task as exc:
            raise WorkflowConfigError(
                f"{PART} cannot enqueue the replays of the workflow queue {queue!r} on the task backend "
                f"{self.options['backend']!r}: {exc}. List {queue!r} in its QUEUES.") from exc

    def check(self) -> Iterable:
        in_process = {
            "backends.immediate.ImmediateBackend": "runs each replay at once in the process that enqueued it, "
                                                   "once its transaction commits (a web request waits for the "
                                                   "replay, the wake-up loop stops for it)",
            "backends.dummy.DummyBackend": "keeps its tasks in memory and never runs them",
        }
        for path, what in in_process.items():
            backend_class = framework_class(self.framework, path)
            if isinstance(self.backend, backend_class):
                return [Warning(
                    f"The tasks executor enqueues replays on the task backend {self.options['backend']!r} "
                    f"({backend_class.__name__}), which {what}: it cannot run replays out of process.",
                    hint="Point the executor's 'backend' option at a backend with a worker of its own, such as "
                         "django-tasks-db's 'django_tasks_db.DatabaseBackend', and run its manage.py db_worker "
                         "beside workflows_worker --no-cluster; tests use django_workflows.testing.",
                    id="django_workflows.W201",
                )]
        return []
