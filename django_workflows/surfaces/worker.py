"""The operator's process: the wake-up loop (timers and cron schedules) and the sweeper, beside the
django-q2 cluster that runs the replays (``cluster``), together.

``manage.py workflows_worker`` only parses arguments and runs ``Worker``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from types import FrameType
from typing import Any

from django.db import DatabaseError, close_old_connections, connections, router
from django.db.models import F

from django_workflows.shared import changes, clock, routing, telemetry
from django_workflows.surfaces.cluster import ClusterWatch
from django_workflows.foundations.conf import workflow_settings
from django_workflows.models import Instance, WorkerHeartbeat
from django_workflows.store.dispatch import next_wake_time, reclaim_dead_leases, sweep, wake_due
from django_workflows.store.retention import purge_finished
from django_workflows.store.schedules import Scheduler

logger = logging.getLogger("django_workflows.worker")

# Seconds between retention sweeps: deleting old instances is not urgent.
PURGE_INTERVAL = 60.0
# Seconds between two batches of a retention sweep: writers waiting for the database (on SQLite, the
# wake-up loop and the replays wait for the one writer) get it between batches of a long backlog.
PURGE_PAUSE = 0.1


class Worker:
    """Runs until told to stop (SIGTERM or SIGINT; a second one forces) or ``max_seconds`` pass."""

    def __init__(self, *, workers: int | None = None, max_seconds: float | None = None,
                 run_cluster: bool = True, probe_interval: float | None = None, queues: list[str] | None = None):
        self.max_seconds = max_seconds
        # Set before the cluster forks, so that its processes take only instances of these queues.
        routing.serve(queues)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.cluster = ClusterWatch(self.worker_id, workers, probe_interval) if run_cluster else None
        self.stop_event = threading.Event()
        self.signals = 0
        self.started = time.monotonic()
        self._last_sweep = 0.0
        self._last_purge = 0.0
        self._purger: threading.Thread | None = None
        # The cron schedules of the workflows of this process, and the next wake time as last read with
        # the monotonic time of the reading (None: read it again), which a wake-up for a schedule alone
        # does not read again while the watcher reports no change.
        self.scheduler = Scheduler()
        self._wake_read: tuple[datetime | None, float] | None = None
        self.wake_watcher: changes.ChangeWatcher = changes.ChangeWatcher(workflow_settings.WAKE_INTERVAL)

    # Signals.

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
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
        try:
            if self.cluster:
                try:
                    self.cluster.start()
                except RuntimeError:
                    # django-q2 raises when the sentinel dies while starting: the watch starts it again.
                    logger.exception("The django-q2 cluster failed to start; starting it again shortly.")
            self.wake_watcher = changes.watcher(router.db_for_read(Instance), changes.WAKE_CHANNEL,
                                                workflow_settings.WAKE_INTERVAL)
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
        # Told of every new wake time, the loop knows that the one it slept until has come: it claims
        # at once, without reading it again first (a statement less between a timer and its replay).
        next_wake = self.next_wake(now, interval, reuse=schedule_due, come=self.wake_watcher.kind != "polling")
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

    def next_wake(self, now: datetime, interval: float, reuse: bool, come: bool = False) -> datetime | None:
        """The earliest wake time (one indexed query). The last reading is taken instead, if it is younger
        than ``interval`` and the watcher reported no change since, by a wake-up for a schedule alone
        (``reuse``) while it is still ahead, and (``come``) once it has come: so a due slot costs the loop
        no statement of its own, nor does a wake time it slept until (the claim that follows takes all
        that is due, whatever the reading said)."""
        if self._wake_read is not None:
            value, read_at = self._wake_read
            if time.monotonic() - read_at < interval and (
                    (reuse and (value is None or value > now)) or (come and value is not None and value <= now)):
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
                self.cluster.look(clock.now())
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


def health(max_age: float | None = None) -> dict[str, Any]:
    """The heartbeats of live workers, and whether any is fresh enough: for a health endpoint or probe."""
    max_age = workflow_settings.HEARTBEAT_STALE_SECONDS if max_age is None else max_age
    cutoff = clock.now() - timedelta(seconds=max_age)
    beats = list(WorkerHeartbeat.objects.values("worker_id", "hostname", "pid", "last_seen", "cluster_restarts"))
    fresh = [beat for beat in beats if beat["last_seen"] >= cutoff]
    return {"healthy": bool(fresh), "workers": beats, "fresh": len(fresh), "max_age": max_age}
