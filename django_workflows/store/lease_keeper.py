"""Keeping a replay's lease alive while a long step runs.

One daemon thread per process renews, every third of ``LEASE_SECONDS``, the
lease of each replay that has held it that long. A short replay never costs a
renewal; a worker that dies stops renewing, so its leases expire and another
worker takes the instances over. A replay whose lease lapsed unrenewed (the
database unreachable, the process frozen) or was found taken runs no further
step body and writes nothing more (``Lease.holds``).

Lease times are written and compared on the database's clock (``clock``); the
holder counts its lease on its own monotonic clock, which no skew moves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections

from django_workflows.shared import clock
from django_workflows.foundations.conf import workflow_settings
from django_workflows.models import Instance, InstanceStatus

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from django_workflows.store.leases import Claim


class Lease:
    """A replay's lease as its process knows it: until when it holds, and whether it was lost.

    The lease expires in the database at ``lease_expires_at``, written from the database's clock; this
    process counts the same span on its monotonic clock, from just before the statement that took or
    renewed it, less a margin. Once that passes without a renewal (the database unreachable, the
    process frozen), or a renewal finds the epoch moved on, another worker may hold the instance:
    the replay must neither run another step body nor write again.
    """

    __slots__ = ("instance_pk", "epoch", "renewed", "deadline", "lost", "thread", "bodies", "lapse_told",
                 "on_lapse")

    def __init__(self, instance_pk: int, epoch: int, taken: float, seconds: float,
                 on_lapse: Callable[[int, float], object] | None = None):
        self.instance_pk = instance_pk
        self.epoch = epoch
        self.lost = False
        # Told once that the lease lapsed unrenewed (``tell_if_lapsed``): the replay's report.
        self.on_lapse = on_lapse
        # The thread whose replay holds the lease.
        self.thread = threading.get_ident()
        # The step bodies of this replay running now, as (their thread's connection, the monotonic time
        # their timeout passes): a body within its timeout is progress (``progress``), and on SQLite the
        # renewal may have to go through its connection (``_renew_inside_a_body``).
        self.bodies: list[tuple[Any, float]] = []
        self.extend(taken, seconds)

    def extend(self, since: float, seconds: float) -> None:
        self.renewed = since
        self.deadline = since + seconds - min(1.0, seconds / 10)
        # Whether on_lapse was told that the lease lapsed (since this renewal).
        self.lapse_told = False

    def holds(self) -> bool:
        return not self.lost and time.monotonic() < self.deadline

    def lapsed_at(self) -> float | None:
        """When (``time.time()``) this holder counted its lease lapsed unrenewed, if its time has run out:
        from then until a renewal lands, the replay starts no step body and writes nothing (``holds``),
        and the lease expires in the database a margin later. None before that (a lease found taken
        before its time was lost, not lapsed)."""
        overdue = time.monotonic() - self.deadline
        return time.time() - overdue if overdue >= 0 else None

    def tell_if_lapsed(self, before: float = float("inf")) -> float | None:
        """``lapsed_at`` if the lease lapsed before ``before`` (``time.time()``), having told ``on_lapse``
        once (with the epoch and that moment): the operator's sign that renewals failed (the database
        unreachable, or this process too busy to renew) for as long as a lease lasts."""
        lapsed = self.lapsed_at()
        if lapsed is None or lapsed >= before:
            return None
        if not self.lapse_told:
            self.lapse_told = True
            if self.on_lapse is not None:
                self.on_lapse(self.epoch, lapsed)
        return lapsed

    def body_started(self, wrapper: BaseDatabaseWrapper, timeout: float) -> tuple[Any, float]:
        """Note that a step body with ``timeout`` seconds starts in this thread, whose connection is
        ``wrapper``; give what it returns to ``body_ended`` once the body is over."""
        body = (wrapper, time.monotonic() + timeout)
        self.bodies.append(body)
        return body

    def body_ended(self, body: tuple[Any, float]) -> None:
        self.bodies.remove(body)

    def progress(self) -> bool | None:
        """What a renewal says of this replay's progress: True while a step body runs within its timeout
        (a step that runs for minutes is progress, not a stall), False once every body running has
        outlived it (stuck, past the interruptions), None outside step bodies (the engine's own work)."""
        bodies = list(self.bodies)
        if not bodies:
            return None
        now = time.monotonic()
        return any(now < deadline for _, deadline in bodies)


class LeaseKeeper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], Lease] = {}
        self._thread: threading.Thread | None = None
        self._wakeup = threading.Event()

    @contextmanager
    def hold(self, instance_pk: int, epoch: int, taken: float | None = None,
             on_lapse: Callable[[int, float], object] | None = None) -> Iterator[Lease]:
        """Keep the lease taken at ``taken`` (monotonic, just before the statement) renewed while the
        block runs; yield the ``Lease``. ``on_lapse`` is told if it lapses unrenewed (``tell_if_lapsed``)."""
        key = (instance_pk, epoch)
        lease = Lease(instance_pk, epoch, time.monotonic() if taken is None else taken,
                      workflow_settings.LEASE_SECONDS, on_lapse)
        with self._lock:
            self._held[key] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="django-workflows-leases", daemon=True)
                self._thread.start()
        try:
            yield lease
        finally:
            with self._lock:
                self._held.pop(key, None)

    def replaying_threads(self) -> set[int]:
        """The threads of this process running a replay now (each holds its instance's lease)."""
        with self._lock:
            return {lease.thread for lease in self._held.values()}

    def _loop(self) -> None:
        leased = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)

        while True:
            seconds = workflow_settings.LEASE_SECONDS
            interval = max(seconds / 3, 0.2)
            # Waking twice per interval renews a lease between one and one and a half intervals after
            # the last renewal, well before the holder counts it lapsed (Lease.holds).
            self._wakeup.wait(min(interval / 2, 1.0))
            due = time.monotonic() - interval
            with self._lock:
                held = list(self._held.values())
            for lease in held:
                if not lease.lost:
                    try:
                        lease.tell_if_lapsed()
                    except Exception:
                        pass  # a log handler's failure must not stop the renewals
            renew = [lease for lease in held if lease.renewed <= due and not lease.lost]
            if not renew:
                continue
            try:
                since = time.monotonic()
                now = clock.now()
                expires = now + timedelta(seconds=seconds)
                for lease in renew:
                    # Not under the lock, so that a slow statement (SQLite waiting out another writer)
                    # never holds up hold()'s exit. A renewal landing after the replay released the
                    # lease changes nothing: the release left the status outside ``leased``, and the
                    # next lease taken on the instance has another epoch.
                    with self._lock:
                        if self._held.get((lease.instance_pk, lease.epoch)) is not lease:
                            continue
                    progress = lease.progress()
                    marked: dict[str, datetime | None] = {} if progress is None else {"progressed_at": now if progress else None}
                    renewed = _renew_inside_a_body(lease, expires, marked)
                    if renewed is None:
                        renewed = Instance.objects.filter(
                            pk=lease.instance_pk, epoch=lease.epoch, status__in=leased
                        ).update(lease_expires_at=expires, **marked)
                    if renewed:
                        # Even after the lease lapsed: the renewal landing at its epoch means no other
                        # worker took the instance over, and the replay goes on if it had not stopped.
                        lease.extend(since, seconds)
                    else:
                        # Terminated, restarted or taken over: the replay stops before its next
                        # step body or write.
                        lease.lost = True
            except Exception:
                # A database hiccup: try again next round; the lease has two more thirds to go, and
                # the replay stops by itself if they pass (Lease.holds).
                pass
            finally:
                # Renewals are rare (only replays longer than a third of the lease need one), so the
                # thread holds no connection between them.
                connections.close_all()


keeper = LeaseKeeper()


def let_go_at(lease: Lease | None, released: float | None) -> float:
    """When a replay let go of its lease: its release write (``released``, or now if it wrote none), or,
    had ``lease`` lapsed unrenewed before that (the database unreachable, the process frozen), the moment it
    lapsed, after which the replay wrote nothing and another worker may take the instance over. One
    instance's replays never overlap."""
    let_go = time.time() if released is None else released
    lapsed = lease.tell_if_lapsed(before=let_go) if lease is not None else None
    return let_go if lapsed is None else lapsed


@dataclass(frozen=True)
class Held:
    """A lease its instance was created holding (``instance_rows.insert_holding``): the claim, when it was
    taken (monotonic, for the keeper) and the database's time it was taken at."""

    claim: Claim
    taken: float
    now: datetime


class _Created(threading.local):
    def __init__(self) -> None:
        self.held: dict[int, Held] = {}


# The leases this thread created instances holding, until its replay of each takes its own.
_created = _Created()


def note_held(held: Held) -> None:
    """Keep the lease a new instance was created holding for this thread's replay of it (``take_held``)."""
    _created.held[held.claim.pk] = held


def take_held(instance_pk: int) -> Held | None:
    """The lease this thread created the instance holding, for its replay to run under; None if there is
    none (the replay takes the lease as ever)."""
    return _created.held.pop(instance_pk, None)


def forget_held(instance_pk: int) -> None:
    """Drop a held lease whose replay will not run here (the executor failed to run it): the lease
    expires unrenewed and the sweeper takes the instance over."""
    _created.held.pop(instance_pk, None)


def _renew_inside_a_body(lease: Lease, expires: datetime, marked: dict[str, datetime | None]) -> int | None:
    """On SQLite, renew the lease through the connection of a step body that is inside a transaction,
    as part of that transaction; return the rows renewed, or None if no body is in one.

    While a body's transaction holds SQLite's write lock (an ``atomic=True`` step for its whole body, a
    body's own ``transaction.atomic()``), no other connection can write: a renewal of the keeper's own
    would wait behind it until the lease lapsed, and the step's journal write would then be refused
    although no one else could have taken the instance. Made inside the body's transaction, the renewal
    needs no lock of its own; it commits with the body's writes, so the lease is live in the database
    the moment the lock is let go, and rolled back with them, it leaves nothing written to protect.
    Django's SQLite connections may be used from another thread (``check_same_thread`` is off), and
    SQLite serializes the statements of one connection.
    """
    for wrapper, _ in list(lease.bodies):
        raw = wrapper.connection
        if wrapper.vendor != "sqlite" or raw is None:
            continue
        try:
            if not raw.in_transaction:
                continue
            ops = wrapper.ops
            assignments = "".join(f", {column} = ?" for column in marked)
            cursor = raw.execute(
                f"UPDATE {ops.quote_name(Instance._meta.db_table)} SET lease_expires_at = ?{assignments} "
                "WHERE id = ? AND epoch = ? AND status IN (?, ?)",
                (ops.adapt_datetimefield_value(expires),
                 *(ops.adapt_datetimefield_value(value) for value in marked.values()),
                 lease.instance_pk, lease.epoch,
                 InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value),
            )
        except Exception:
            continue  # closed by the body meanwhile (an interrupted attempt's): renew as usual
        renewed: int = cursor.rowcount
        return renewed
    return None
