"""The replay task of the Celery executor (``django_workflows.executors.celery``), declared with
``shared_task`` so that every Celery app of the process knows it, the project's worker included. The
executor's ``install()`` imports this module, from ``AppConfig.ready()`` in every process whose
executor is the Celery one, and when the executor is built.

Why ``acks_late`` and not ``reject_on_worker_lost``: neither is what keeps a replay from being lost or run
twice (the lease and the sweeper are, whatever Celery does), but together they decide how soon a dead
worker's replay comes back.

- ``acks_late=True``: the message is acknowledged once the replay has returned, not when a worker takes it
  off the queue. A worker killed with replays prefetched or running leaves them unacknowledged, and the
  broker hands them to another worker (RabbitMQ as soon as the dead worker's connection closes; Redis once
  its ``visibility_timeout`` has passed) instead of losing them until the sweeper's next look
  (``REDISPATCH_SECONDS``). A redelivered replay whose instance is still leased by the dead process does
  nothing; the sweeper resumes that one.
- ``reject_on_worker_lost`` is left off: when a pool process dies mid-replay (the OOM killer, say) and its
  worker survives, Celery acknowledges the task as failed instead of putting it back at once, where it
  would find the dead process's lease still held and do nothing, or, for a replay that kills its process
  each time, loop between queue and worker. The sweeper of ``workflows_worker`` sees the process is gone,
  counts a crash against ``POISON_LIMIT``, and sends the replay again.
"""

from __future__ import annotations

from celery import shared_task
from django.db import close_old_connections

from django_workflows.executors.base import CELERY_REPLAY_TASK, REPLAY_TASK, run_task


@shared_task(name=CELERY_REPLAY_TASK, acks_late=True, reject_on_worker_lost=False, ignore_result=True)
def run_replay(instance_pk: int) -> None:
    """One replay of one instance: the task carries only its primary key."""
    # Around each replay as Django around each request and django-q2 around each task: a connection past
    # CONN_MAX_AGE, or broken, is closed, and the next statement opens another. Celery's Django fix-up
    # closes every connection around every task instead, unless CELERY_DB_REUSE_MAX is set (the how-to
    # sets it, leaving the connections to CONN_MAX_AGE and this).
    close_old_connections()
    try:
        run_task(REPLAY_TASK, instance_pk)
    finally:
        close_old_connections()
