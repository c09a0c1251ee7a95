"""Keeping a replay's lease alive while a long step runs.

One daemon thread per process renews, every third of ``LEASE_SECONDS``, the
lease of each replay that has held it that long. A short replay never costs a
renewal; a worker that dies stops renewing, so its leases expire and another
worker takes the instances over.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from datetime import timedelta

from django.db import connections


class LeaseKeeper:
    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], float] = {}
        self._thread: threading.Thread | None = None
        self._wakeup = threading.Event()

    @contextmanager
    def hold(self, instance_pk: int, epoch: int):
        key = (instance_pk, epoch)
        with self._lock:
            self._held[key] = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="django-workflows-leases", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(key, None)

    def _loop(self) -> None:
        from django_workflows import clock
        from django_workflows.conf import workflow_settings
        from django_workflows.models import Instance, InstanceStatus

        leased = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)

        while True:
            seconds = workflow_settings.LEASE_SECONDS
            interval = max(seconds / 3, 0.2)
            self._wakeup.wait(min(interval, 1.0))
            due = time.monotonic() - interval
            with self._lock:
                renew = [key for key, last in self._held.items() if last <= due]
            if not renew:
                continue
            try:
                expires = clock.now() + timedelta(seconds=seconds)
                # Under the lock, so that no renewal lands after hold() has returned.
                with self._lock:
                    for pk, epoch in renew:
                        if (pk, epoch) not in self._held:
                            continue
                        Instance.objects.filter(pk=pk, epoch=epoch, status__in=leased).update(
                            lease_expires_at=expires
                        )
                        self._held[(pk, epoch)] = time.monotonic()
            except Exception:
                # A database hiccup: try again next round; the lease has two more thirds to go.
                pass
            finally:
                # Renewals are rare (only replays longer than a third of the lease need one), so the
                # thread holds no connection between them.
                connections.close_all()


keeper = LeaseKeeper()
