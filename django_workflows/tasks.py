"""The tasks an executor runs, addressed by name (``REPLAY_TASK``), so that executors, which the store
calls to enqueue a replay, never import the engine that the replay runs."""

from __future__ import annotations

import logging
import time

from django.db import connections

from django_workflows import clock
from django_workflows.executors import enqueue_many
from django_workflows.models import WorkerHeartbeat
from django_workflows.replay import replay

logger = logging.getLogger("django_workflows.tasks")

# Seconds after which a task of several replays starts no more of them and hands the rest on as a task
# of their own: a task then runs at most this long past its longest replay, which django-q2's timeout
# already allows for, and a slow replay does not hold up the others for long.
BATCH_SECONDS = 5.0


def run_replay(instance_pk: int) -> None:
    """One replay of one instance."""
    replay(instance_pk)


def run_replays(instance_pks: list[int]) -> None:
    """One replay of each instance, one after another, each as if it were a task of its own: a replay
    that fails is logged and the next one runs (the failed one's instance is left as a failing single
    task would leave it, to its lease and the sweeper)."""
    started = time.monotonic()
    for n, pk in enumerate(instance_pks):
        if n and time.monotonic() - started >= BATCH_SECONDS:
            enqueue_many(instance_pks[n:])
            return
        try:
            replay(pk)
        except Exception:
            logger.exception("The replay of instance %s failed; going on with the other %s of its task.", pk,
                             len(instance_pks) - n - 1)
            _drop_unusable_connections()


def _drop_unusable_connections() -> None:
    """As django-q2 does between two tasks: a connection that the failure left unusable is closed, and
    the next replay opens another. One inside a transaction (a test's) is the caller's to keep."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def answer_probe(worker_id: str) -> None:
    """The wedge probe: proves that the cluster still takes tasks from its queue."""
    WorkerHeartbeat.objects.filter(worker_id=worker_id).update(probe_answered_at=clock.now())
