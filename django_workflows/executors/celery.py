"""Replays on Celery: for a project whose workers are Celery's already.

One replay is one Celery task whose only argument is the instance's primary
key (``django_workflows.executors.celery_task.run_replay``), sent through the
project's Celery app to the queue named by the executor's options, once the
transaction that made the instance runnable commits. A ``celery worker`` that
consumes that queue runs it; ``workflows_worker --no-cluster`` beside it fires
the timers and runs the sweeper, which send replays through this executor too.

The broker is not the truth: a task lost before it ran (a broker restarted
without persistence, a publish that failed after the commit) leaves its
instance queued, and the sweeper sends its replay again after
``REDISPATCH_SECONDS``; a task delivered twice finds the lease taken, or the
instance finished, and does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.checks import CheckMessage, Warning
from django.utils.module_loading import import_string

from django_workflows.shared import routing
from django_workflows.errors import WorkflowConfigError, require_extra
from django_workflows.executors.base import CELERY_REPLAY_TASK, BaseExecutor, by_queue

PART = "The Celery executor (DJANGO_WORKFLOWS['EXECUTOR'])"
# The name every replay task is sent under (defined beside the other task names, where celery_task.py
# reads it without importing this module).
REPLAY_TASK_NAME = CELERY_REPLAY_TASK
OPTIONS = ("app", "queue")


class CeleryExecutor(BaseExecutor):
    """Sends each replay as a task through the Celery app at the dotted path ``app``, to ``queue`` (the
    app's own routing, ``task_routes`` or its default queue, when ``queue`` is not given)."""

    worker_command = "celery -A <your app> worker"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # Refused here, before an instance is written that no task could ever be sent for.
        require_extra("celery", "celery", PART)
        from celery import Celery

        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise WorkflowConfigError(
                f"{PART} takes the options {', '.join(OPTIONS)}; remove {', '.join(map(repr, unknown))} from "
                "DJANGO_WORKFLOWS['EXECUTOR_OPTIONS']."
            )
        app_path, queue = options.get("app"), options.get("queue")
        if not isinstance(app_path, str) or not app_path:
            raise WorkflowConfigError(
                f"{PART} needs EXECUTOR_OPTIONS['app'], the dotted path of your Celery app "
                f"(e.g. 'proj.celery.app'); got {app_path!r}."
            )
        try:
            app = import_string(app_path)
        except ImportError as exc:
            raise WorkflowConfigError(f"{PART} cannot import the Celery app {app_path!r}: {exc}") from exc
        if not isinstance(app, Celery):
            raise WorkflowConfigError(
                f"{PART}: EXECUTOR_OPTIONS['app'] = {app_path!r} is a {type(app).__name__}, not a Celery app; "
                "name the module attribute that holds Celery(...)."
            )
        if queue is not None and (not isinstance(queue, str) or not queue.strip()):
            raise WorkflowConfigError(
                f"{PART}: EXECUTOR_OPTIONS['queue'] must be the name of a Celery queue, or left out for the "
                f"app's own routing; got {queue!r}."
            )
        self.app = app
        self.queue: str | None = queue
        self.install()

    @classmethod
    def install(cls) -> None:
        # Declares the replay task on every Celery app of this process, the worker's included: a worker
        # that did not know it would drop each replay it received as an unregistered task.
        if _celery_installed():
            from django_workflows.executors import celery_task  # noqa: F401

    def celery_queue(self, queue: str) -> str | None:
        """The Celery queue a workflow queue's replays are sent to: the default queue's to ``queue`` (or
        the app's own routing), another's to the Celery queue of its name, which the workers started for
        it consume (``celery worker -Q heavy``)."""
        return self.queue if queue == routing.DEFAULT_QUEUE else queue

    def _send(self, instance_pk: int, queue: str, producer: Any = None) -> None:
        # ignore_result: a replay's outcome lives in the workflow tables, not in a result backend.
        self.app.send_task(REPLAY_TASK_NAME, args=[instance_pk], queue=self.celery_queue(queue),
                           ignore_result=True, producer=producer)

    def enqueue_replay(self, instance_pk: int) -> None:
        [(queue, _)] = by_queue([instance_pk]).items()
        self._send(instance_pk, queue)

    def enqueue_replays(self, instance_pks: list[int]) -> None:
        # One task per replay, so that each goes to whichever worker process is free, all sent over one
        # connection to the broker.
        with self.app.producer_or_acquire() as producer:
            for queue, pks in by_queue(instance_pks).items():
                for pk in pks:
                    self._send(pk, queue, producer)

    def check(self) -> Iterable[CheckMessage]:
        conf = self.app.conf
        messages: list[CheckMessage] = []
        if conf.task_always_eager:
            messages.append(Warning(
                f"The Celery app {self.options['app']!r} has task_always_eager set, which the Celery executor "
                "does not follow: replays are sent to the broker all the same, and run only where a worker "
                "consumes them.",
                hint="Leave task_always_eager off for this app; tests run replays in the test's process with "
                     "django_workflows.testing.",
                id="django_workflows.W301",
            ))
        if conf.task_soft_time_limit:
            messages.append(Warning(
                f"The Celery app {self.options['app']!r} sets task_soft_time_limit "
                f"({conf.task_soft_time_limit} s): Celery raises SoftTimeLimitExceeded wherever the replay is, "
                "inside the journal's writes or a step the user's code retries, instead of failing the step's "
                "attempt.",
                hint="Leave task_soft_time_limit unset (or None) and give steps a 'timeout' in their config; a "
                     "hard task_time_limit above the longest step timeout is safe (the sweeper resumes a "
                     "killed replay).",
                id="django_workflows.W302",
            ))
        return messages


def _celery_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("celery") is not None
