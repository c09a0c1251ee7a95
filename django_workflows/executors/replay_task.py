"""The replay task of the tasks executor (``django_workflows.executors.tasks``).

Every enqueued task names this module and function (``task_path`` in django-tasks-db's table), so
both keep their names from one release to the next. The task is declared on the framework's default
backend and queue, as any ``@task`` is; the executor enqueues it ``using()`` the backend and queue
of its options, and the worker runs it on the backend it was enqueued on.
"""

from __future__ import annotations

from django_workflows.executors.base import REPLAY_TASK, run_task
from django_workflows.executors.tasks_framework import tasks_framework

task = tasks_framework().task


@task
def run_replay(instance_pk: int) -> None:
    """One replay of one instance: the task carries only its primary key."""
    run_task(REPLAY_TASK, instance_pk)
