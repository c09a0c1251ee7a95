"""Keeping a replay's lease alive while a long step runs.

One daemon thread per process renews, every third of ``LEASE_SECONDS``, the
lease of each replay that has held it that long. A short replay never costs a
renewal; a worker that dies stops renewing, so its leases expire and another
worker takes the instances over. A replay whose lease lapsed unrenewed (the
database unreachable, the process frozen) or was found taken runs no further
step body and writes nothing more (``Lease.holds``).

Lease times are written and compared on the database's clock (``clock``); the
holder counts its lease on its own monotonic clock, which no skew moves.

A lease names its holder (``Holder``): the host, the process and the thread.
A worker reclaims at once the leases of this host's processes that are gone,
instead of waiting for them to expire.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction
from django.db.models.expressions import RawSQL

from django_workflows import clock, limits, options, rows
from django_workflows.conf import workflow_settings
from django_workflows.models import Instance, InstanceStatus, Step

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.base.operations import BaseDatabaseOperations


class Lease:
    """A replay's lease as its process knows it: until when it holds, and whether it was lost.

    The lease expires in the database at ``lease_expires_at``, written from the database's clock; this
    process counts the same span on its monotonic clock, from just before the statement that took or
    renewed it, less a margin. Once that passes without a renewal (the database unreachable, the
    process frozen), or a renewal finds the epoch moved on, another worker may hold the instance:
    the replay must neither run another step body nor write again.
    """

    __slots__ = ("instance_pk", "epoch", "renewed", "deadline", "lost", "thread", "bodies")

    def __init__(self, instance_pk: int, epoch: int, taken: float, seconds: float):
        self.instance_pk = instance_pk
        self.epoch = epoch
        self.lost = False
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

    def holds(self) -> bool:
        return not self.lost and time.monotonic() < self.deadline

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
    def hold(self, instance_pk: int, epoch: int, taken: float | None = None) -> Iterator[Lease]:
        """Keep the lease taken at ``taken`` (monotonic, just before the statement) renewed while the
        block runs; yield the ``Lease``."""
        key = (instance_pk, epoch)
        lease = Lease(instance_pk, epoch, time.monotonic() if taken is None else taken,
                      workflow_settings.LEASE_SECONDS)
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
                renew = [lease for lease in self._held.values() if lease.renewed <= due and not lease.lost]
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


# -- who holds a lease ---------------------------------------------------------------------------

def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses):
    [0] is the state, [19] the start time in clock ticks since boot."""
    return _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()


def _host_identity() -> str:
    """This host as a lease names it: the host name, then (on Linux) the boot and the PID namespace.

    The boot and the namespace say where a process id means something: a lease taken on another
    machine with our host name, in another container that shares it (host networking), or before a
    reboot, is not ours to judge.
    Without /proc the host name stands alone, and nothing is reclaimed early.
    """
    name = socket.gethostname()[:100]
    try:
        boot = _read("/proc/sys/kernel/random/boot_id").strip().replace("-", "")[:12]
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
        # /proc must show this process's own namespace (not a host's /proc mounted in a container),
        # or the process ids read there are not the ones the leases name.
        own_proc = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return name
    if not boot or not namespace.isdigit() or not own_proc:
        return name
    return f"{name}/{boot}/{namespace}"


def _start_time(pid: int) -> str:
    try:
        return _stat_fields(pid)[19]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: ``host:pid:start:thread``, written in the instance's ``lease_owner``.

    ``start`` is the process's start time (clock ticks since boot, from /proc), so a process id that
    the system gave to another process since is not mistaken for the holder.
    """

    host: str
    pid: int
    start: str
    thread: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.thread}"

    @classmethod
    def parse(cls, owner: str) -> Holder | None:
        """The holder named by ``owner``, or None if it is not in this form (older leases)."""
        parts = owner.rsplit(":", 3)
        if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], int(parts[3]))

    def is_gone(self) -> bool:
        """Whether this holder's process no longer runs. Only meaningful for a holder of this host;
        in doubt, the answer is no (the lease then expires as any other)."""
        if self.pid <= 0 or not self.start:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # running, as another user
        except OSError:
            return False
        try:
            fields = _stat_fields(self.pid)
        except FileNotFoundError:
            return True  # exited since
        except OSError:
            return False
        if len(fields) < 20:
            return False
        # A zombie is dead, waiting for a parent that was killed with it; a different start time
        # means the process id was given to another process.
        return fields[0] in ("Z", "X") or fields[19] != self.start


_this_process: tuple[int, str, str] | None = None  # (pid, host, start), read again after a fork


def this_host() -> str:
    return _process()[1]


def _process() -> tuple[int, str, str]:
    global _this_process
    pid = os.getpid()
    if _this_process is None or _this_process[0] != pid:
        host = _host_identity()
        # Without the boot and namespace in the host, no lease of ours is ever judged by its pid.
        _this_process = (pid, host, _start_time(pid) if "/" in host else "")
    return _this_process


def holder() -> Holder:
    """The holder of the leases that this thread takes."""
    pid, host, start = _process()
    return Holder(host, pid, start, threading.get_ident())


# -- taking the lease -----------------------------------------------------------------------------

_CLAIMED_COLUMNS = ("id", "workflow_name", "instance_id", "params", "status", "epoch", "created_at", "crash_count",
                    "terminating", "success_retention", "error_retention", "parent_id", "started_at")


@dataclass(frozen=True)
class Claim:
    """What a replay needs of the instance whose lease it took."""

    pk: int
    workflow_name: str
    instance_id: str
    params: Any
    status: str
    epoch: int
    created_at: datetime
    crash_count: int
    terminating: bool = False
    # The instance's own retention, for the purge time written as it ends (None: RETENTION_DAYS).
    success_retention: timedelta | None = None
    error_retention: timedelta | None = None
    # The parent of a child workflow (step.child), which its end is sent to; None for any other instance.
    parent_id: int | None = None
    # When the instance first started: the moment of this claim if this is its first (the rate limit
    # counts starts by it).
    started_at: datetime | None = None

    def __str__(self) -> str:
        return f"{self.workflow_name}/{self.instance_id}"


# The crash count after a replay died holding the lease: reset if it made progress under that lease,
# one more otherwise. Progress is what the replay did: a step body that renewed the lease while it ran
# within its timeout (progressed_at, which taking a lease clears), or a finished step journaled under
# that lease (updated_at is when it took the lease; a renewal does not touch it). Only replays that die
# without progress lead to poison: a step that runs for minutes, or one longer than the task queue's
# timeout that still finishes one step per replay, is slow, not poisonous.
_CRASH_COUNTED = (
    "CASE WHEN {instance}.progressed_at IS NOT NULL OR EXISTS (SELECT 1 FROM {steps} cs "
    "WHERE cs.instance_id = {instance}.id AND cs.ended_at >= {instance}.updated_at) THEN 0 "
    "ELSE crash_count + 1 END"
)


def crash_counted_sql(connection: BaseDatabaseWrapper) -> str:
    """``_CRASH_COUNTED`` for a raw UPDATE of the instance table."""
    ops = connection.ops
    return _CRASH_COUNTED.format(instance=ops.quote_name(Instance._meta.db_table),
                                 steps=ops.quote_name(Step._meta.db_table))


def crash_counted(connection: BaseDatabaseWrapper) -> RawSQL:
    """``crash_counted_sql`` as a query expression, for the sweeper's UPDATE of expired leases."""
    return RawSQL(crash_counted_sql(connection), [])


def take(instance_pk: int, owner: str, now: datetime, lease_seconds: float) -> Claim | None:
    """Take the instance's lease if it is runnable, bumping its epoch; return the ``Claim``, or None.

    One statement: the conditional UPDATE lets one replay through however many
    deliveries arrive, and its RETURNING reads what the replay needs. Taking over
    a lease that expired means the last replay died without finishing: a crash, counted toward
    poison unless that replay journaled a finished step (``crash_counted_sql``).

    When workflows registered here declare a concurrency or rate limit, that statement leaves their
    instances out, and only an instance it did not take goes on to ``_take_limited``: a workflow without
    limits still costs one statement.
    """
    limited = options.limited()
    if not limited:
        return _take(instance_pk, owner, now, lease_seconds)
    names = sorted(limited)
    claim = _take(instance_pk, owner, now, lease_seconds,
                  f"workflow_name NOT IN ({', '.join(['%s'] * len(names))})", names)
    if claim is not None:
        return claim
    return _take_limited(instance_pk, owner, now, lease_seconds, limited)


def _runnable(ops: BaseDatabaseOperations, table: str = "") -> str:
    """The claim's condition on the status: queued or waiting, or leased with the lease expired."""
    prefix = f"{table}." if table else ""
    return (f"({prefix}status IN (%s, %s) OR ({prefix}status IN (%s, %s) AND {prefix}lease_expires_at < %s))")


def _runnable_params(stamp: Any) -> list[Any]:
    running, pausing = InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value
    return [InstanceStatus.QUEUED.value, InstanceStatus.WAITING.value, running, pausing, stamp]


def _take(instance_pk: int, owner: str, now: datetime, lease_seconds: float, condition: str = "",
          condition_params: Sequence[Any] = ()) -> Claim | None:
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    sql = (
        f"UPDATE {table} SET "
        "status = CASE WHEN status = %s THEN status ELSE %s END, "
        "epoch = epoch + 1, "
        f"crash_count = CASE WHEN status IN (%s, %s) THEN ({crash_counted_sql(connection)}) "
        "ELSE crash_count END, "
        "lease_owner = %s, lease_expires_at = %s, wake_at = NULL, progressed_at = NULL, "
        "started_at = COALESCE(started_at, %s), updated_at = %s "
        f"WHERE id = %s AND {_runnable(ops)}{f' AND {condition}' if condition else ''} "
        f"RETURNING {', '.join(ops.quote_name(c) for c in _CLAIMED_COLUMNS)}"
    )
    running, pausing = InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value
    stamp = ops.adapt_datetimefield_value(now)
    params = [
        pausing, running,
        running, pausing,
        owner, ops.adapt_datetimefield_value(now + timedelta(seconds=lease_seconds)),
        stamp, stamp,
        instance_pk, *_runnable_params(stamp), *condition_params,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    return Claim(*rows.reader(connection, Instance, _CLAIMED_COLUMNS).decode(row, connection))


# -- limits ------------------------------------------------------------------------------------------

# Why a deferred instance waits, as the admin, the API and the CLI show it.
RATE_LIMITED_REASON = "rate limit {rate} of workflow {name!r} reached: starts when the window allows"


def holds_slot_sql(table: str) -> str:
    """The condition under which an instance of ``table`` holds one of its workflow's concurrency slots:
    a live lease (running, or finishing its step before a pause). Queued, waiting (sleeping, waiting for an
    event or a retry) and paused instances hold none, nor does a lease that expired (its worker died)."""
    return f"({table}.status IN (%s, %s) AND {table}.lease_expires_at >= %s)"


def _holds_slot_params(stamp: Any) -> list[Any]:
    return [InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value, stamp]


def _take_limited(instance_pk: int, owner: str, now: datetime, lease_seconds: float,
                  limited: dict[str, limits.WorkflowLimits]) -> Claim | None:
    """Take the lease of an instance of a workflow with limits, within them.

    One transaction, serialized per workflow: on PostgreSQL an advisory transaction lock keyed by the
    workflow's name (taken by the statement that reads the name), so that two claims cannot both see
    the last free slot; on SQLite the transaction's ``BEGIN IMMEDIATE`` serializes every writer already.
    The rate limit: a first replay past it sets the instance waiting until the window allows, and the
    wake-up loop hands it on then. The concurrency limit: the claim takes the lease only while the
    instances of the workflow that hold a slot, together with those queued before this one, are fewer
    than the limit; refused, the instance stays queued, and the replay that next frees a slot queues it
    (``hand_on``).
    """
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    stamp = ops.adapt_datetimefield_value(now)
    names = sorted(limited)
    in_names = ", ".join(["%s"] * len(names))
    postgresql = connection.vendor == "postgresql"
    lock = ", pg_advisory_xact_lock(hashtextextended(%s || workflow_name, 0))" if postgresql else ""
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT workflow_name, started_at{lock} FROM {table} "
            f"WHERE id = %s AND workflow_name IN ({in_names}) AND {_runnable(ops)}",
            [*([_LOCK_PREFIX] if postgresql else []), instance_pk, *names, *_runnable_params(stamp)],
        )
        row = cursor.fetchone()
        if row is None:
            return None  # not runnable (a duplicate delivery), or not limited here
        name, started_at = row[0], row[1]
        own = limited[name]
        if own.rate is not None and started_at is None:
            cursor.execute(
                f"SELECT started_at FROM {table} WHERE workflow_name = %s AND started_at > %s "
                "ORDER BY started_at DESC LIMIT 1 OFFSET %s",
                [name, ops.adapt_datetimefield_value(now - own.rate.period), own.rate.count - 1],
            )
            full = cursor.fetchone()
            if full is not None:
                oldest = rows.reader(connection, Instance, ("started_at",)).decode(full, connection)[0]
                cursor.execute(
                    f"UPDATE {table} SET status = %s, wake_at = %s, waiting_for = NULL, waiting_reason = %s, "
                    "updated_at = %s WHERE id = %s AND status IN (%s, %s) AND started_at IS NULL",
                    [InstanceStatus.WAITING.value, ops.adapt_datetimefield_value(oldest + own.rate.period),
                     RATE_LIMITED_REASON.format(rate=own.rate, name=name), stamp, instance_pk,
                     InstanceStatus.QUEUED.value, InstanceStatus.WAITING.value],
                )
                return None
        if own.concurrency is None:
            return _take(instance_pk, owner, now, lease_seconds)
        ahead = (
            f"(SELECT COUNT(*) FROM {table} s WHERE s.workflow_name = %s AND ({holds_slot_sql('s')} OR "
            f"(s.status = %s AND (s.created_at < {table}.created_at OR "
            f"(s.created_at = {table}.created_at AND s.id < {table}.id))))) < %s"
        )
        return _take(instance_pk, owner, now, lease_seconds, ahead,
                     [name, *_holds_slot_params(stamp), InstanceStatus.QUEUED.value, own.concurrency])


_LOCK_PREFIX = "django_workflows.limits:"


def hand_on(workflow_name: str, concurrency: int, now: datetime) -> list[int]:
    """The instances of the workflow to queue a replay of now that a replay of it gave back its slot:
    the oldest queued ones, as many as slots are free. One statement; the caller enqueues them.

    Several replays ending at once may each name the same instance (a duplicate delivery, which does
    nothing); the last of them to read sees every slot freed, so no free slot is left without a replay
    on its way while instances wait for one."""
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    stamp = ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, (SELECT COUNT(*) FROM {table} s WHERE s.workflow_name = %s AND {holds_slot_sql('s')}) "
            f"FROM {table} WHERE workflow_name = %s AND status = %s ORDER BY created_at, id LIMIT %s",
            [workflow_name, *_holds_slot_params(stamp), workflow_name, InstanceStatus.QUEUED.value, concurrency],
        )
        found = cursor.fetchall()
    if not found:
        return []
    free = max(concurrency - found[0][1], 0)
    return [pk for pk, _ in found[:free]]


def with_queued(workflow_names: list[str]) -> list[str]:
    """Which of the workflows have queued instances: one statement whatever their number, each name
    one probe of the (workflow, status, created) index, so an idle worker's sweep does not grow with
    the workflows that declare a concurrency limit."""
    if not workflow_names:
        return []
    connection = connections[router.db_for_write(Instance)]
    table = connection.ops.quote_name(Instance._meta.db_table)
    probe = f"SELECT %s WHERE EXISTS (SELECT 1 FROM {table} WHERE workflow_name = %s AND status = %s)"
    params: list[str] = []
    for name in workflow_names:
        params += [name, name, InstanceStatus.QUEUED.value]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join([probe] * len(workflow_names)), params)
        return sorted(name for (name,) in cursor.fetchall())


def slot_counts(workflow_name: str, now: datetime) -> dict[str, int]:
    """How many instances of the workflow hold a concurrency slot (``running``) and are queued."""
    holding = Instance.objects.filter(
        workflow_name=workflow_name,
        status__in=(InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE), lease_expires_at__gte=now,
    ).count()
    queued = Instance.objects.filter(workflow_name=workflow_name, status=InstanceStatus.QUEUED).count()
    return {"running": holding, "queued": queued}
