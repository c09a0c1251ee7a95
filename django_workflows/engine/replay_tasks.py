"""The tasks an executor runs, addressed by name (``REPLAY_TASK``), so that executors, which the store
calls to enqueue a replay, never import the engine that the replay runs."""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.db import close_old_connections, connections, router

from django_workflows.shared import clock
from django_workflows.foundations.conf import workflow_settings
from django_workflows.executors import enqueue_many, get_executor
from django_workflows.models import Instance, WorkerHeartbeat
from django_workflows.engine.replay import replay

logger = logging.getLogger("django_workflows.tasks")  # its name in LOGGING settings since 0.1

# Seconds after which a task of several replays starts no more of them and hands the rest on as a task
# of their own: a task then runs at most this long past its longest replay, which django-q2's timeout
# already allows for, and a slow replay does not hold up the others for long.
BATCH_SECONDS = 5.0


def run_replay(instance_pk: int) -> None:
    """One replay of one instance."""
    replay(instance_pk)


def run_replays(instance_pks: list[int]) -> None:
    """One replay of each instance, each as if it were a task of its own: a replay that fails is logged
    and the others run (the failed one's instance is left as a failing single task would leave it, to
    its lease and the sweeper).

    A replay spends most of its time waiting for its commits, so on a database that takes concurrent
    writers the replays are spread over ``lane_count()`` lanes: this thread and threads of a pool kept
    by the process, each with its own connection, which ``CONN_MAX_AGE`` keeps open between tasks or not,
    as django-q2 does for its own. Each replay still takes its own lease, fenced by its epoch. SQLite has
    one writer at a time, and a caller's transaction (a test's) is seen by its own connection only: the
    replays then run one after another in this thread."""
    started = time.monotonic()
    lanes = _lanes(instance_pks)
    helpers = [_pool().submit(_lane_in_pool, lane, started) for lane in lanes[1:]]
    _run_lane(lanes[0], started)
    for helper in helpers:
        helper.result()


def lane_count() -> int:
    """How many lanes a task of several replays runs on: ``REPLAY_THREADS``, or, when it is None, sized to
    the cores. A replay's CPU (the worker's and the database's) is under half its time, the rest waiting
    for commits, so two replays in flight per core keep the cores busy; more only share them, each lane
    a thread under the process's one interpreter lock and a database connection. The machine's cores
    are shared among the executor's processes on it (a django-q2 cluster's workers): two workers on two
    cores run two lanes each."""
    threads = workflow_settings.REPLAY_THREADS
    if threads is None:
        threads = -(-2 * (os.cpu_count() or 1) // max(get_executor().replay_processes(), 1))
    return int(threads)


def _lanes(instance_pks: list[int]) -> list[list[int]]:
    connection = connections[router.db_for_write(Instance)]
    threads = lane_count()
    if connection.vendor == "sqlite" or connection.in_atomic_block or threads <= 1 or len(instance_pks) <= 1:
        return [list(instance_pks)]
    count = min(threads, len(instance_pks))
    return [list(instance_pks[n::count]) for n in range(count)]


# The process's pool of lane threads (lane_count() - 1 of them, started as lanes need them), made on first
# use in the process that uses it (django-q2 forks its workers: a pool inherited through a fork has no
# threads), and made again if the setting changes.
_lane_pool: tuple[tuple[int, int], ThreadPoolExecutor] | None = None
_lane_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _lane_pool
    owner = (os.getpid(), lane_count())
    with _lane_pool_lock:
        if _lane_pool is None or _lane_pool[0] != owner:
            if _lane_pool is not None and _lane_pool[0][0] == owner[0]:
                _lane_pool[1].shutdown(wait=False)
            threads = ThreadPoolExecutor(max(owner[1] - 1, 1), thread_name_prefix="django-workflows-replays")
            _lane_pool = (owner, threads)
        return _lane_pool[1]


def _lane_in_pool(instance_pks: list[int], started: float) -> None:
    # Around each lane as django-q2 around each task: a connection past CONN_MAX_AGE, or broken, is
    # closed, and the next statement opens another.
    close_old_connections()
    try:
        _run_lane(instance_pks, started)
    finally:
        close_old_connections()


def _run_lane(instance_pks: list[int], started: float) -> None:
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
