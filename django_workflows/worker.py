"""The operator's process: a django-q2 cluster, the wake-up loop (timers and cron schedules) and the
sweeper, together.

``manage.py workflows_worker`` only parses arguments and runs ``Worker``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any
from datetime import timedelta

from django.db import DatabaseError, close_old_connections, connections, router
from django.db.models import F, Q

from django_workflows import changes, clock, processes, telemetry
from django_workflows.conf import workflow_settings
from django_workflows.models import Instance, InstanceStatus, WorkerHeartbeat
from django_workflows.store import holders
from django_workflows.store.dispatch import next_wake_time, reclaim_dead_leases, sweep, wake_due
from django_workflows.store.retention import purge_finished
from django_workflows.store.schedules import Scheduler

logger = logging.getLogger("django_workflows.worker")

# Seconds between retention sweeps: deleting old instances is not urgent.
PURGE_INTERVAL = 60.0
# Seconds between two batches of a retention sweep: writers waiting for the database (on SQLite, the
# wake-up loop and the replays wait for the one writer) get it between batches of a long backlog.
PURGE_PAUSE = 0.1


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
        from django_q.conf import Conf

        if self.workers:
            Conf.WORKERS = self.workers
        # The cluster's processes are forked: they must not inherit this process's database
        # connections, or closing theirs would close ours at the server.
        connections.close_all()
        _cluster_dies_with_its_parents()
        handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
        self.cluster = Cluster()
        # django-q2's Cluster installs its own handlers; the worker's come first.
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
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


class Worker:
    """Runs until told to stop (SIGTERM or SIGINT; a second one forces) or ``max_seconds`` pass."""

    def __init__(self, *, workers: int | None = None, max_seconds: float | None = None,
                 run_cluster: bool = True, probe_interval: float | None = None):
        self.max_seconds = max_seconds
        self.cluster = ClusterProcess(workers) if run_cluster else None
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.stop_event = threading.Event()
        self.signals = 0
        self.probe_interval = probe_interval
        self.started = time.monotonic()
        self._last_sweep = 0.0
        self._last_probe = 0.0
        # The probe of the cluster that has not been answered yet: when it was first asked for, and
        # whether it reached the queue (asking writes to the database, which may be what is stuck).
        self._probe_sent = None
        self._probe_delivered = False
        self._last_purge = 0.0
        self._purger: threading.Thread | None = None
        # The cron schedules of the workflows of this process, and the next wake time as last read with
        # the monotonic time of the reading (None: read it again), which a wake-up for a schedule alone
        # does not read again while the watcher reports no change.
        self.scheduler = Scheduler()
        self._wake_read: tuple[object, float] | None = None
        self.wake_watcher: changes.ChangeWatcher = changes.ChangeWatcher(workflow_settings.WAKE_INTERVAL)

    # Signals.

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1
        if self.signals == 1:
            logger.info("Stopping after the current replays (signal %s again to force).", signum)
            self.stop_event.set()
            return
        logger.warning("Forced stop.")
        if self.cluster:
            self.cluster.kill()
        os._exit(1)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    # The loop.

    def run(self) -> None:
        self.install_signal_handlers()
        # With OpenTelemetry on, this process reports how many instances are queued.
        telemetry.observe_queue_depth()
        self.register()
        if self.cluster:
            try:
                self.cluster.start()
            except RuntimeError:
                # django-q2 raises when the sentinel dies while starting: the watch starts it again.
                logger.exception("The django-q2 cluster failed to start; starting it again shortly.")
        self.wake_watcher = changes.watcher(router.db_for_read(Instance), changes.WAKE_CHANNEL,
                                            workflow_settings.WAKE_INTERVAL)
        try:
            while not self.stop_event.is_set():
                if self.max_seconds is not None and time.monotonic() - self.started >= self.max_seconds:
                    break
                close_old_connections()
                try:
                    pause = self.run_once()
                except Exception:
                    # A database restart or a network blip: log it, wait a moment, carry on.
                    logger.exception("Worker loop failed; retrying in a second.")
                    close_old_connections()
                    self.stop_event.wait(1.0)
                    continue
                self.idle(pause)
        finally:
            self.stop_event.set()  # a purge in progress stops after its current batch
            self.wake_watcher.close()
            if self.cluster:
                self.cluster.stop()
            if self._purger is not None:
                self._purger.join()
            close_old_connections()
            try:
                WorkerHeartbeat.objects.filter(worker_id=self.worker_id).delete()
            except DatabaseError:
                # Its row goes stale instead; checks and the admin tell a stale heartbeat from a live one.
                logger.warning("Could not remove this worker's heartbeat on the way out.", exc_info=True)

    def register(self) -> None:
        """Write this worker's heartbeat row. A database that is restarting, or a connection cut on the
        way (a failover, a proxy), is waited for as in the loop, rather than ending the worker."""
        while not self.stop_event.is_set():
            now = clock.now()
            try:
                WorkerHeartbeat.objects.update_or_create(
                    worker_id=self.worker_id,
                    defaults={"hostname": socket.gethostname(), "pid": os.getpid(), "started_at": now,
                              "last_seen": now},
                )
                return
            except DatabaseError:
                logger.warning("Could not reach the database to register this worker; retrying in a second.",
                               exc_info=True)
                close_old_connections()
                self.stop_event.wait(1.0)

    def idle(self, pause: float) -> None:
        """Sleep ``pause`` seconds, less if the database tells of a new wake time or a stop is asked."""
        deadline = time.monotonic() + pause
        while not self.stop_event.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.wake_watcher.wait(min(left, 0.5)):
                self._wake_read = None
                return

    def run_once(self) -> float:
        """One look at the timers and the schedules (and, when due, one sweep); return how long to sleep."""
        # A loop that is told of new wake times needs no look before the next one it knows of.
        interval = (workflow_settings.WAKE_INTERVAL if self.wake_watcher.kind == "polling"
                    else workflow_settings.IDLE_RECHECK_SECONDS)
        now = clock.now()
        if not self.scheduler.synced:
            self.scheduler.sync(now)  # no statement unless this process declares schedules
        schedule_due = self.scheduler.next_due is not None and self.scheduler.next_due <= now
        next_wake = self.next_wake(now, interval, reuse=schedule_due)
        woken = 0
        if next_wake is not None and next_wake <= now:
            woken = wake_due(now)
            next_wake = self.next_wake(now, interval, reuse=False)
        if schedule_due:
            self.scheduler.run_due(now)
        monotonic = time.monotonic()
        if monotonic - self._last_sweep >= workflow_settings.SWEEP_INTERVAL:
            self._last_sweep = monotonic
            self.sweep_and_beat(woken)
        elif woken:
            WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(
                wakeups=F("wakeups") + woken
            )
        interval = min(interval, workflow_settings.SWEEP_INTERVAL - (time.monotonic() - self._last_sweep))
        for moment in (next_wake, self.scheduler.next_due):
            if moment is not None:
                interval = min(interval, (moment - clock.now()).total_seconds())
        return max(0.0, interval)

    def next_wake(self, now, interval: float, reuse: bool):
        """The earliest wake time (one indexed query). A wake-up for a schedule alone (``reuse``) takes the
        last reading instead, if it is younger than ``interval``, still ahead, and the watcher reported
        no change since: so a due slot costs the loop no statement of its own."""
        if reuse and self._wake_read is not None:
            value, read_at = self._wake_read
            if time.monotonic() - read_at < interval and (value is None or value > now):
                return value
        value = next_wake_time()
        self._wake_read = (value, time.monotonic())
        return value

    def sweep_and_beat(self, woken: int = 0) -> None:
        if self.cluster:
            # Before the sweep, and whatever becomes of it: a cluster process frozen inside a write
            # transaction holds SQLite's write lock, every write of the sweep fails with "database is
            # locked", and the cluster must still be seen to be wedged and restarted, which ends it.
            try:
                self.watch_cluster(clock.now())
            except Exception:
                logger.exception("Could not watch the django-q2 cluster; trying again at the next sweep.")
        # The first sweep runs as the worker starts: the replays that its host's killed processes
        # left behind resume now, not when their leases expire.
        reclaimed = reclaim_dead_leases()
        if reclaimed:
            logger.info("Resumed %s instances whose worker process on this host is gone.", reclaimed)
        redispatched = reclaimed + sweep()
        now = clock.now()
        WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(
            last_seen=now, wakeups=F("wakeups") + woken, redispatched=F("redispatched") + redispatched
        )
        if time.monotonic() - self._last_purge >= PURGE_INTERVAL:
            self._last_purge = time.monotonic()
            self.start_purge()

    def start_purge(self) -> None:
        """Start a retention sweep in a thread of its own, unless the last one is still running.

        A backlog of finished instances takes many batches: run here, it would stop the timers and the
        heartbeat (and with them the health check) until it was done."""
        if self._purger is not None and self._purger.is_alive():
            return
        self._purger = threading.Thread(target=self._purge, name="workflows-purge", daemon=True)
        self._purger.start()

    def _purge(self) -> None:
        try:
            purge_finished(pause=PURGE_PAUSE, stop=self.stop_event)
        except Exception:
            logger.exception("Retention sweep failed; trying again in %s s.", PURGE_INTERVAL)
        finally:
            # The thread's own connection is not left open for the minute until the next sweep (a new
            # thread would not reuse it anyway).
            connections.close_all()

    def watch_cluster(self, now) -> None:
        """Restart the django-q2 cluster if its sentinel died, or if it stopped taking tasks.

        Every so often the cluster is sent a probe, a task that notes its answer on this worker's
        heartbeat. The probe is remembered here, in this process, from the moment it is asked for:
        sending it writes to the database (the heartbeat, and the queue on the ORM broker), and a
        cluster wedged inside a write transaction on SQLite makes those writes fail, so a probe that
        could not even be sent counts as unanswered too, and is sent again at the next look.
        """
        assert self.cluster is not None  # watched only with a cluster (sweep_and_beat)
        if not self.cluster.alive:
            logger.error("The django-q2 cluster is gone; starting it again.")
            self.restart_cluster()
            return
        wedge = workflow_settings.WEDGE_SECONDS
        if self._probe_sent is not None and self._probe_delivered:
            answered = WorkerHeartbeat.objects.filter(worker_id=self.worker_id).values_list(
                "probe_answered_at", flat=True).first()
            if answered is not None and answered >= self._probe_sent:
                self._probe_sent = None
        if self._probe_sent is not None and now - self._probe_sent > timedelta(seconds=wedge):
            if not self.cluster_progressing(self._probe_sent, now):
                logger.error("The django-q2 cluster took no task for %s s, and none of its workers is "
                             "inside a replay; restarting it.", wedge)
                self.restart_cluster(wedged=True)
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

    def cluster_progressing(self, since, now) -> bool:
        """Whether the cluster, though its probe is unanswered, is busy rather than wedged.

        Busy is what a replay does, not what a column says: one of the cluster's processes is inside a
        step body that runs within its timeout (its lease keeper, renewing the lease from inside the body,
        marks ``progressed_at``, at least once a ``LEASE_SECONDS``), or replays took or gave back leases
        since the probe was sent (the probe waits in the queue behind a backlog). A cluster whose every
        worker is inside a ten-minute step answers the probe only when one of them is free, and must not
        be killed for it. A live lease alone is not enough: a worker hung outside any step (at its exit,
        on a lock of the task queue) may go on renewing one, and its cluster takes no task.
        """
        assert self.cluster is not None  # asked only with a cluster (watch_cluster)
        leased = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)
        owners = [f"{holders.this_host()}:{pid}:" for pid in self.cluster.pids()]
        if owners:
            holding = Q()
            for owner in owners:
                holding |= Q(lease_owner__startswith=owner)
            inside_a_step = Instance.objects.filter(
                holding, status__in=leased, lease_expires_at__gte=now,
                progressed_at__gte=now - timedelta(seconds=workflow_settings.LEASE_SECONDS),
            )
            if inside_a_step.exists():
                return True
        # A replay that took or gave back a lease since (both write updated_at): the queue moves.
        return Instance.objects.filter(updated_at__gte=since).exclude(status=InstanceStatus.QUEUED).exists()

    def restart_cluster(self, wedged: bool = False) -> None:
        # A wedged cluster cannot stop gracefully (its workers would finish their current task, and
        # that task is what is stuck): it is killed at once, as a crash would end it. The replays it
        # held resume elsewhere when their leases are reclaimed.
        assert self.cluster is not None  # restarted only with a cluster (watch_cluster)
        if wedged:
            self.cluster.kill()
        else:
            self.cluster.stop(wait=10)
        self.cluster.start()
        self._probe_sent, self._probe_delivered = None, False
        self._last_probe = time.monotonic()
        WorkerHeartbeat.objects.filter(worker_id=self.worker_id).update(
            cluster_restarts=F("cluster_restarts") + 1, probe_sent_at=None, probe_answered_at=None
        )


def health(max_age: float | None = None) -> dict:
    """The heartbeats of live workers, and whether any is fresh enough: for a health endpoint or probe."""
    max_age = workflow_settings.HEARTBEAT_STALE_SECONDS if max_age is None else max_age
    cutoff = clock.now() - timedelta(seconds=max_age)
    beats = list(WorkerHeartbeat.objects.values("worker_id", "hostname", "pid", "last_seen", "cluster_restarts"))
    fresh = [beat for beat in beats if beat["last_seen"] >= cutoff]
    return {"healthy": bool(fresh), "workers": beats, "fresh": len(fresh), "max_age": max_age}
