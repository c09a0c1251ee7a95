"""The one interface between the engine and whatever runs replays."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from django.core.checks import CheckMessage
from django.utils.module_loading import import_string

from django_workflows.shared import routing

# The tasks, by name: an executor runs them without importing the engine, which imports the store,
# which calls the executor to enqueue.
REPLAY_TASK = "django_workflows.engine.replay_tasks.run_replay"
REPLAYS_TASK = "django_workflows.engine.replay_tasks.run_replays"
PROBE_TASK = "django_workflows.engine.replay_tasks.answer_probe"
# The name the Celery executor sends every replay under, kept from one release to the next: a task queued
# before an upgrade is run after it by this name.
CELERY_REPLAY_TASK = "django_workflows.executors.celery_task.run_replay"


def run_task(name: str, *args: Any) -> None:
    import_string(name)(*args)


def by_queue(instance_pks: list[int]) -> dict[str, list[int]]:
    """The instances by the queue their replays are routed to: all of them to the default queue, with
    no statement, while the project has no other (``options.queues_in_use``); else as their rows say,
    read in one statement."""
    from django_workflows.models import Instance
    from django_workflows.shared.options import queues_in_use

    if queues_in_use() == {routing.DEFAULT_QUEUE}:
        return {routing.DEFAULT_QUEUE: list(instance_pks)}
    queues = dict(Instance.objects.filter(pk__in=instance_pks).values_list("pk", "queue"))
    routed: dict[str, list[int]] = {}
    for pk in instance_pks:
        # An instance deleted meanwhile has nothing to replay; its task finds nothing to do anywhere.
        routed.setdefault(queues.get(pk, routing.DEFAULT_QUEUE), []).append(pk)
    return routed


class BaseExecutor(ABC):
    """Runs replays of instances somewhere: in this thread, or on a task queue.

    The engine calls ``enqueue_replay(pk)`` after the transaction that made an
    instance runnable commits. A replay that is enqueued twice is harmless:
    the lease lets only one run, and the other finds nothing to do.
    """

    #: Whether ``enqueue_replay`` may be called inside the caller's transaction
    #: (its queue lives in the same database, so the enqueue commits or rolls
    #: back with the change that caused it). Otherwise the engine calls it on commit.
    enqueues_in_transaction: bool = False

    #: Whether replays run in this process as soon as they are enqueued.
    runs_inline: bool = False

    #: The command that runs this executor's replays, when it is not a django-q2 cluster: then
    #: ``workflows_worker`` refuses to start one, and runs beside that command with ``--no-cluster``.
    worker_command: str | None = None

    def __init__(self, **options: Any) -> None:
        self.options = options

    @abstractmethod
    def enqueue_replay(self, instance_pk: int) -> None:
        """Arrange for one replay of the instance with primary key ``instance_pk``."""

    def enqueue_replays(self, instance_pks: list[int]) -> None:
        """Arrange for one replay of each instance: many made runnable at once (due timers, a batch
        created). An executor whose tasks cost more than the replays they carry may put several in one
        task; each replay stays its own, as if enqueued alone."""
        for pk in instance_pks:
            self.enqueue_replay(pk)

    def replays_at_once(self) -> bool:
        """Whether a replay enqueued now, outside a transaction, runs at once in this thread: the instance
        may then be created already holding that replay's lease (``store.instance_rows``). False for an
        executor that runs its replays elsewhere or later."""
        return False

    @classmethod
    def install(cls) -> None:
        """Prepare this process for the executor, once Django's apps are ready and before anything is
        enqueued or run (``AppConfig.ready()`` calls it on the configured executor's class). Most need
        nothing; one whose worker must know its tasks by the time it takes one declares them here."""

    def replay_processes(self) -> int:
        """How many processes of a machine run this executor's replays side by side: a task of several
        replays sizes its lanes by the cores each has (``REPLAY_THREADS`` None). One per core, as a
        django-q2 cluster and a Celery worker start by default, unless the executor knows better."""
        return os.cpu_count() or 1

    def check(self) -> Iterable[CheckMessage]:
        """System-check messages about this executor's configuration."""
        return ()
