"""The django-q2 cluster a worker runs: its processes started, stopped and killed (``ClusterProcess``),
and a watch that restarts it when its sentinel dies or it stops taking tasks (``ClusterWatch``).

The worker's loop (``worker.Worker``) knows nothing of django-q2 beyond this module: it starts the
watch, has it look at every sweep, and stops it on the way out.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import F, Q

from django_workflows.shared import processes, routing
from django_workflows.foundations.conf import workflow_settings
from django_workflows.models import Instance, InstanceStatus, Step, WorkerHeartbeat
from django_workflows.store import holders

# Its messages are the worker's, under the logger name that operators' LOGGING settings know.
logger = logging.getLogger("django_workflows.worker")


# The cluster's processes die with their parent (Linux). django-q2's sentinel does not watch its own
# parent, nor its workers, pusher and monitor theirs: a SIGKILLed sentinel (or command) left them
# running unsupervised, still taking replays, beside the cluster started in its place.
_PR_SET_PDEATHSIG = 1
_fork_depth = 0  # 0 in the command, 1 in the sentinel, 2 in its workers, pusher and monitor
_forking_parent = 0
# libc's prctl once looked up, False where there is none (not Linux), None before the first look.
_prctl: Any = None


def _remember_parent() -> None:
    global _forking_parent
    _forking_parent = os.getpid()


def _die_with_parent() -> None:
    global _fork_depth
    _fork_depth += 1
    if _fork_depth > 2:
        return  # processes that a step forks are the step's business
    _prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0),
           ctypes.c_ulong(0))
    if os.getppid() != _forking_parent:
        os._exit(1)  # the parent died before the request took effect


def _cluster_dies_with_its_parents() -> None:
    global _prctl
    if _prctl is not None:
        return
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = False  # not Linux: the sentinel is still watched and restarted, its orphans are not
        return
    os.register_at_fork(before=_remember_parent, after_in_child=_die_with_parent)


class ClusterProcess:
    """The django-q2 cluster this worker runs, started, watched and, if wedged, restarted."""

    def __init__(self, workers: int | None):
        self.workers = workers
        # django-q2's Cluster, once started.
        self.cluster: Any = None

    def start(self) -> None:
        from django_q.cluster import Cluster

        from django_workflows.executors import queue_broker
        from django_q.conf import Conf

        if self.workers:
            Conf.WORKERS = self.workers
        # The cluster's processes are forked: they must not inherit this process's database
        # connections, or closing theirs would close ours at the server.
        connections.close_all()
        _cluster_dies_with_its_parents()
        handlers = {signal.SIGTERM: signal.getsignal(signal.SIGTERM),
                    signal.SIGINT: signal.getsignal(signal.SIGINT)}

        class WorkersCluster(Cluster):
            """django-q2's Cluster, whose signal handlers are the worker's.

            Its constructor installs its own, which stop a sentinel it has not started yet: a stop asked
            for between that and the worker's handlers put back (an operator's Ctrl-C as the worker starts,
            or a deploy's SIGTERM) raised out of the constructor and ended the command with its heartbeat
            left behind. Forwarded, the signal is the worker's stop, whenever it comes.
            """

            def sig_handler(self, signum: int, frame: Any) -> None:
                handler = handlers[signal.Signals(signum)]
                if callable(handler):
                    handler(signum, frame)
                elif handler == signal.SIG_DFL:
                    signal.signal(signum, handler)
                    signal.raise_signal(signum)

        served = routing.served()
        self.cluster = WorkersCluster(broker=None if served is None else queue_broker.for_queues(served))
        signal.signal(signal.SIGTERM, handlers[signal.SIGTERM])
        signal.signal(signal.SIGINT, handlers[signal.SIGINT])
        self.cluster.start()

    @property
    def alive(self) -> bool:
        return bool(self.cluster and self.cluster.sentinel and self.cluster.sentinel.is_alive())

    def stop(self, wait: float = 60.0) -> None:
        """Stop gracefully (workers finish their current task), forcing it after ``wait`` seconds."""
        if not self.alive:
            return
        stopper = threading.Thread(target=self.cluster.stop, daemon=True)
        stopper.start()
        stopper.join(wait)
        if self.alive:
            self.kill()

    def pids(self) -> list[int]:
        """The cluster's processes: its sentinel and the workers, pusher and monitor under it."""
        if not (self.cluster and self.cluster.sentinel and self.cluster.sentinel.pid):
            return []
        sentinel = self.cluster.sentinel.pid
        return [sentinel, *processes.children_of(sentinel)]

    def kill(self) -> None:
        pids = self.pids()
        if not pids:
            return  # no sentinel was started
        sentinel, *processes = pids
        for pid in [*processes, sentinel]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.cluster.sentinel.join(5)


class ClusterWatch:
    """The cluster of the worker ``worker_id``, restarted if its sentinel died or it stopped taking tasks."""

    def __init__(self, worker_id: str, workers: int | None, probe_interval: float | None = None):
        self.worker_id = worker_id
        self.process = ClusterProcess(workers)
        self.probe_interval = probe_interval
        self._last_probe = 0.0
        # The probe of the cluster that has not been answered yet: when it was first asked for, and
        # whether it reached the queue (asking writes to the database, which may be what is stuck).
        self._probe_sent: datetime | None = None
        self._probe_delivered = False

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def look(self, now: datetime) -> None:
        """Restart the django-q2 cluster if its sentinel died, or if it stopped taking tasks.

        Every so often the cluster is sent a probe, a task that notes its answer on this worker's
        heartbeat. The probe is remembered here, in this process, from the moment it is asked for:
        sending it writes to the database (the heartbeat, and the queue on the ORM broker), and a
        cluster wedged inside a write transaction on SQLite makes those writes fail, so a probe that
        could not even be sent counts as unanswered too, and is sent again at the next look.
        """
        if not self.process.alive:
            logger.error("The django-q2 cluster is gone; starting it again.")
            self.restart()
            return
        wedge = workflow_settings.WEDGE_SECONDS
        if self._probe_sent is not None and self._probe_delivered:
            answered = WorkerHeartbeat.objects.filter(worker_id=self.worker_id).values_list(
                "probe_answered_at", flat=True).first()
            if answered is not None and answered >= self._probe_sent:
                self._probe_sent = None
        if self._probe_sent is not None and now - self._probe_sent > timedelta(seconds=wedge):
            if not self.progressing(self._probe_sent, now):
                logger.error("The django-q2 cluster took no task for %s s, and none of its workers is "
                             "inside a replay; restarting it.", wedge)
                self.restart(wedged=True)
                return
        probe_interval = self.probe_interval or wedge / 4
        if self._probe_sent is None and time.monotonic() - self._last_probe >= probe_interval:
            self._last_probe = time.monotonic()
            self._probe_sent, self._probe_delivered = now, False
        if self._probe_sent is not None and not self._probe_delivered:
            from django_workflows.executors.q2 import DjangoQExecutor

            WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(probe_sent_at=self._probe_sent)
            DjangoQExecutor().enqueue_probe(self.worker_id)
            self._probe_delivered = True

    def progressing(self, since: datetime, now: datetime) -> bool:
        """Whether the cluster, though its probe is unanswered, is busy rather than wedged.

        Busy is what a replay does, not what a column says: one of the cluster's processes is inside a
        step body that runs within its timeout (its lease keeper, renewing the lease from inside the body,
        marks ``progressed_at``, at least once a ``LEASE_SECONDS``) or journaled a step lately, or replays
        took or gave back leases since the probe was sent, within the last ``WEDGE_SECONDS`` (the probe
        waits in the queue behind a backlog). A cluster whose every worker is inside a ten-minute step
        answers the probe only when one of them is free, and must not be killed for it. A live lease alone
        is not enough: a worker hung outside any step (at its exit, on a lock of the task queue) may go on
        renewing one, and its cluster takes no task.
        """
        leased = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)
        # Lately, not merely since the probe was sent: a replay that took its lease just after the probe
        # and froze there, holding SQLite's write lock, leaves the probe unanswered for good, and would
        # otherwise count as progress for ever.
        lately = max(since, now - timedelta(seconds=workflow_settings.WEDGE_SECONDS))
        owners = [f"{holders.this_host()}:{pid}:" for pid in self.process.pids()]
        if owners:
            holding = Q()
            for owner in owners:
                holding |= Q(lease_owner__startswith=owner)
            held = Instance.objects.filter(holding, status__in=leased, lease_expires_at__gte=now)
            if held.filter(progressed_at__gte=now - timedelta(seconds=workflow_settings.LEASE_SECONDS)).exists():
                return True
            # Or one of its replays journaled a step lately. A replay of many short steps may run for
            # longer than WEDGE_SECONDS on a loaded machine, its lease taken once for all of them, with no
            # renewal landing inside a body to mark progressed_at.
            if Step.objects.filter(instance__in=held.values("pk"), ended_at__gte=lately).exists():
                return True
        # A replay that took or gave back a lease lately (both write updated_at): the queue moves.
        return Instance.objects.filter(updated_at__gte=lately).exclude(status=InstanceStatus.QUEUED).exists()

    def restart(self, wedged: bool = False) -> None:
        # A wedged cluster cannot stop gracefully (its workers would finish their current task, and
        # that task is what is stuck): it is killed at once, as a crash would end it. The replays it
        # held resume elsewhere when their leases are reclaimed.
        if wedged:
            self.process.kill()
        else:
            self.process.stop(wait=10)
        self.process.start()
        self._probe_sent, self._probe_delivered = None, False
        self._last_probe = time.monotonic()
        WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(
            cluster_restarts=F("cluster_restarts") + 1, probe_sent_at=None, probe_answered_at=None
        )
