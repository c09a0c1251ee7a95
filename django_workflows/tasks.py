"""The tasks an executor runs, addressed by name (``REPLAY_TASK``), so that executors, which the store
calls to enqueue a replay, never import the engine that the replay runs."""

from __future__ import annotations

from django_workflows import clock
from django_workflows.models import WorkerHeartbeat
from django_workflows.replay import replay


def run_replay(instance_pk: int) -> None:
    """One replay of one instance."""
    replay(instance_pk)


def answer_probe(worker_id: str) -> None:
    """The wedge probe: proves that the cluster still takes tasks from its queue."""
    WorkerHeartbeat.objects.filter(worker_id=worker_id).update(probe_answered_at=clock.now())
