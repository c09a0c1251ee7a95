"""Taking a replay's lease: the one statement that lets one replay of an instance through, and the
concurrency and rate limits that statement keeps.

Keeping the lease alive while a replay runs is ``lease_keeper``'s; naming its holder is ``holders``'.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction
from django.db.models.expressions import RawSQL

from django_workflows.shared import deadlines, limits, options, routing, rows
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, InstanceStatus, Step
from django_workflows.store import journal_entries
from django_workflows.store.journal_entries import Entry
from django_workflows.store.literals import Varying

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.base.operations import BaseDatabaseOperations

__all__ = ["Claim", "take", "hand_on", "slot_counts", "crash_counted", "crash_counted_sql", "holds_slot_sql",
           "RATE_LIMITED_REASON"]


_CLAIMED_COLUMNS = ("id", "workflow_name", "instance_id", "params", "status", "epoch", "created_at", "crash_count",
                    "terminating", "success_retention", "error_retention", "parent_id", "started_at", "timeout",
                    "deadline", "limit_key", "queue", "priority")


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
    # The instance's own timeout and the deadline it came to (``django_workflows.shared.deadlines``); None: none.
    timeout: timedelta | None = None
    deadline: datetime | None = None
    # What its workflow's keyed limits count it by ("" when they are not keyed): the slot it gives back.
    limit_key: str = ""
    # Where and in what order it runs (``django_workflows.shared.routing``): a successor keeps them.
    queue: str = "default"
    priority: int = 0
    # The journal, read with the lease, by step key; None: not read (the caller loads it).
    journal: dict[str, Entry] | None = None

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
    """Take the lease of the instance, or of one to start before it, if runnable; return the ``Claim``
    (whose ``pk`` says which instance it is), or None.

    Only an instance of a workflow class registered in this process, in a queue this process serves
    (``routing.served``), is taken: any other stays as it is, for a worker that can run it. A queued
    instance gives way to a queued instance of its queue of higher priority and earlier turn
    (``routing``): that one's lease is taken instead, and the caller queues a replay of its own again.

    One statement: the conditional UPDATE lets one replay through however many
    deliveries arrive, and its RETURNING reads what the replay needs. Taking over
    a lease that expired means the last replay died without finishing: a crash, counted toward
    poison unless that replay journaled a finished step (``crash_counted_sql``).

    When workflows registered here declare a concurrency or rate limit, that statement leaves their
    instances out, and only an instance it did not take goes on to ``_take_limited``: a workflow without
    limits still costs one statement, and one with limits at most four.
    """
    scope = _scope()
    if scope is None:
        return None  # no workflow class here: nothing this process could run
    limited = options.limited()
    if not limited:
        return _take(instance_pk, owner, now, lease_seconds, scope, prefer=scope)
    unlimited = _one_of("workflow_name", sorted(limited), negated=True)
    claim = _take(instance_pk, owner, now, lease_seconds, scope & unlimited, prefer=scope & unlimited)
    if claim is not None:
        return claim
    return _take_limited(instance_pk, owner, now, lease_seconds, limited, scope)


@dataclass(frozen=True)
class _Condition:
    """A condition on the instance table, its columns written ``{t}column`` so that it can be put on
    the table by another name (``on``), with its parameters."""

    template: str
    params: tuple[Any, ...] = ()

    def __and__(self, other: _Condition) -> _Condition:
        return _Condition(f"{self.template} AND {other.template}", (*self.params, *other.params))

    @property
    def sql(self) -> str:
        return self.on("")

    def on(self, alias: str) -> str:
        """The condition on the columns of ``alias`` ("" for the unnamed table)."""
        return self.template.format(t=f"{alias}." if alias else "")


def _one_of(column: str, values: Sequence[Any], negated: bool = False) -> _Condition:
    return _Condition(f"{{t}}{column} {'NOT ' if negated else ''}IN ({', '.join(['%s'] * len(values))})",
                      tuple(values))


def _scope() -> _Condition | None:
    """The instances this process may take: those of the workflow classes registered here, in the queues
    it serves. None when no class is registered."""
    names = registry.names()
    if not names:
        return None
    scope = _one_of("workflow_name", names)
    queues = routing.served()
    return scope if queues is None else scope & _one_of("queue", queues)


def _preferred_sql(table: str, prefer: _Condition, postgresql: bool) -> str:
    """The instance a claim of ``%s`` (queued) takes instead: the queued instance of its queue of higher
    priority and earlier turn that comes first, among those ``prefer`` allows; NULL for none. On
    PostgreSQL it is locked, skipping one another claim has locked, so two claims never pick the same.

    The claimed instance is read by its primary key alone, and its queue, priority and turn bound the
    queued instances as values, never in a join: a herd queued at once leaves statistics that say no
    instance is queued, and a join then had the planner find the claimed instance by scanning the
    queued ones and compare each queued instance with it, every take reading all of them. As values,
    they are a range of the partial index ``dw_instance_queue_turns`` whatever the statistics say."""
    lock = " FOR UPDATE OF b SKIP LOCKED" if postgresql else ""

    def claimed(column: str) -> str:
        return f"(SELECT {column} FROM {table} WHERE id = %s)"

    return (
        f"(SELECT b.id FROM {table} b WHERE b.status = %s AND {prefer.on('b')} "
        f"AND b.queue = {claimed('queue')} AND b.priority > {claimed('priority')} "
        f"AND b.turn_at < {claimed('turn_at')} "
        # LIMIT 1: a subquery the planner neither merges into the query nor pushes the conditions into.
        f"AND EXISTS (SELECT 1 FROM (SELECT * FROM {table} WHERE id = %s LIMIT 1) o "
        f"WHERE o.status = %s AND {prefer.on('o')}) "
        f"ORDER BY b.turn_at, b.id LIMIT 1{lock})"
    )


def _runnable(ops: BaseDatabaseOperations, table: str = "") -> str:
    """The claim's condition on the status: queued or waiting, or leased with the lease expired."""
    prefix = f"{table}." if table else ""
    return (f"({prefix}status IN (%s, %s) OR ({prefix}status IN (%s, %s) AND {prefix}lease_expires_at < %s))")


def _runnable_params(stamp: Any) -> list[Any]:
    running, pausing = InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value
    return [InstanceStatus.QUEUED.value, InstanceStatus.WAITING.value, running, pausing, stamp]


@functools.lru_cache(maxsize=64)
def _take_sql(alias: str, vendor: str, condition: str, prefer: str | None) -> str:
    """The text of the take's UPDATE within ``condition``, giving way as ``prefer`` says (templates of
    ``_Condition``s): built once per database and shape, of which a process makes a few."""
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    target = "%s" if prefer is None else f"COALESCE({_preferred_sql(table, _Condition(prefer), vendor == 'postgresql')}, %s)"
    return (
        f"UPDATE {table} SET status = CASE WHEN status = %s THEN status ELSE %s END, epoch = epoch + 1, "
        f"crash_count = CASE WHEN status IN (%s, %s) THEN ({crash_counted_sql(connection)}) ELSE crash_count END, "
        "lease_owner = %s, lease_expires_at = %s, wake_at = NULL, progressed_at = NULL, "
        "started_at = COALESCE(started_at, %s), updated_at = %s "
        f"WHERE id = {target} AND {_runnable(ops)} AND {_Condition(condition).sql} "
        f"RETURNING {', '.join(ops.quote_name(c) for c in _CLAIMED_COLUMNS)}"
    )


def _take(instance_pk: int, owner: str, now: datetime, lease_seconds: float, condition: _Condition,
          prefer: _Condition | None = None, constant: bool = True) -> Claim | None:
    """The claim's UPDATE, of the instance (or of the one it gives way to, with ``prefer``) within
    ``condition``, whose values are the same at every call unless not ``constant``."""
    connection = connections[router.db_for_write(Instance)]
    adapt, pk, queued = connection.ops.adapt_datetimefield_value, Varying(instance_pk), InstanceStatus.QUEUED.value
    target_params = [pk] if prefer is None else [queued, *prefer.params, pk, pk, pk, pk, queued, *prefer.params, pk]
    sql = _take_sql(connection.alias, connection.vendor, condition.template, prefer and prefer.template)
    stamp = Varying(adapt(now))
    running, pausing = InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value
    params = [
        pausing, running, running, pausing,
        Varying(owner), Varying(adapt(now + timedelta(seconds=lease_seconds))), stamp, stamp,
        *target_params, *_runnable_params(stamp), *condition.params,
    ]
    row, journal = journal_entries.take_reading_journal(connection, sql, params, _CLAIMED_COLUMNS, stamp, constant)
    if row is None:
        return None
    return Claim(*rows.reader(connection, Instance, _CLAIMED_COLUMNS).decode(row, connection) + [journal])


# -- limits ------------------------------------------------------------------------------------------

# Why a deferred instance waits, as the admin, the API and the CLI show it.
RATE_LIMITED_REASON = "rate limit {rate} of workflow {name!r}{key} reached: starts when the window allows"


def holds_slot_sql(table: str) -> str:
    """The condition under which an instance of ``table`` holds one of its workflow's concurrency slots:
    a live lease (running, or finishing its step before a pause). Queued, waiting (sleeping, waiting for an
    event or a retry) and paused instances hold none, nor does a lease that expired (its worker died)."""
    return f"({table}.status IN (%s, %s) AND {table}.lease_expires_at >= %s)"


def _holds_slot_params(stamp: Any) -> list[Any]:
    return [InstanceStatus.RUNNING.value, InstanceStatus.WAITING_FOR_PAUSE.value, stamp]


def _take_limited(instance_pk: int, owner: str, now: datetime, lease_seconds: float,
                  limited: dict[str, limits.WorkflowLimits], scope: _Condition) -> Claim | None:
    """Take the lease of an instance of a workflow with limits, within them.

    One transaction, serialized per workflow, or per (workflow, key) when all its limits are keyed
    (``WorkflowLimits.lock_name``): on PostgreSQL an advisory transaction lock on that name (taken by the
    statement that reads the instance), so that two claims cannot both see the last free slot; on SQLite
    the transaction's ``BEGIN IMMEDIATE`` serializes every writer already.
    The rate limit: a first replay past it sets the instance waiting until the window allows, and the
    wake-up loop hands it on then. The concurrency limit: the claim takes the lease only while the
    instances that hold a slot, together with those queued before this one in their turn (priority,
    then age: ``routing``), are fewer than the limit, counting the instances of its key when the limit
    is keyed, of its workflow otherwise; refused, the instance stays queued, and the replay that next
    frees a slot queues it (``hand_on``). At most three statements, after ``take``'s first.
    """
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    stamp = ops.adapt_datetimefield_value(now)
    within = scope & _one_of("workflow_name", sorted(limited))
    postgresql = connection.vendor == "postgresql"
    lock, lock_params = "", []
    if postgresql:
        per_key = sorted(name for name, own in limited.items() if own.lock_name(name, "") != name)
        keyed_lock = (f"CASE WHEN workflow_name IN ({', '.join(['%s'] * len(per_key))}) "
                      "THEN workflow_name || ':' || limit_key ELSE workflow_name END") if per_key else "workflow_name"
        lock, lock_params = f", pg_advisory_xact_lock(hashtextextended(%s || {keyed_lock}, 0))", [_LOCK_PREFIX, *per_key]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT workflow_name, limit_key, started_at, deadline, wake_at{lock} FROM {table} "
            f"WHERE id = %s AND {within.sql} AND {_runnable(ops)}",
            [*lock_params, instance_pk, *within.params, *_runnable_params(stamp)],
        )
        row = cursor.fetchone()
        if row is None:
            return None  # not runnable (a duplicate delivery), or not limited here
        name, key = row[0], row[1]
        started_at, deadline, wake_at = rows.reader(connection, Instance, _HELD).decode(row[2:5], connection)
        own = limited[name]
        if deadlines.passed(deadline, now):
            # Its replay runs no step of run(), only times it out: held back, it would end late.
            return _take(instance_pk, owner, now, lease_seconds, scope)
        if own.rate is not None and started_at is None:
            window = [name, *([key] if own.rate_keyed else []), ops.adapt_datetimefield_value(now - own.rate.period)]
            cursor.execute(rate_window_sql(table, own.rate_keyed), [*window, own.rate.count - 1])
            full = cursor.fetchone()
            if full is not None:
                oldest = rows.reader(connection, Instance, ("started_at",)).decode(full, connection)[0]
                # Woken when the window allows, or by its deadline if that comes first.
                cursor.execute(
                    f"UPDATE {table} SET status = %s, wake_at = %s, waiting_for = NULL, waiting_reason = %s, "
                    "updated_at = %s WHERE id = %s AND status IN (%s, %s) AND started_at IS NULL",
                    [InstanceStatus.WAITING.value,
                     ops.adapt_datetimefield_value(deadlines.earliest(oldest + own.rate.period, deadline)),
                     RATE_LIMITED_REASON.format(rate=own.rate, name=name,
                                                key=f" for {own.key} {key!r}" if own.rate_keyed else ""),
                     stamp, instance_pk, InstanceStatus.QUEUED.value, InstanceStatus.WAITING.value],
                )
                return None
        if own.concurrency is None:
            return _take(instance_pk, owner, now, lease_seconds, scope)
        counted = _counted(own, key)
        # Fewer than the limit ahead: no limit-th one exists. Found by reading up to the limit only, so a
        # long queue behind the instance costs the claim nothing.
        ahead = _Condition(
            f"NOT EXISTS (SELECT 1 FROM {table} s WHERE s.workflow_name = %s{counted.on('s')} AND "
            f"({holds_slot_sql('s')} OR (s.status = %s AND (s.turn_at < {table}.turn_at OR "
            f"(s.turn_at = {table}.turn_at AND s.id < {table}.id)))) LIMIT 1 OFFSET %s)",
            (name, *counted.params, *_holds_slot_params(stamp), InstanceStatus.QUEUED.value, own.concurrency - 1),
        )
        claim = _take(instance_pk, owner, now, lease_seconds, scope & ahead, constant=False)
        if claim is None and deadline is not None and wake_at != deadline:
            # Held back, it wakes at its deadline as a waiting instance does (dispatch.WOKEN_STATUSES).
            cursor.execute(f"UPDATE {table} SET wake_at = %s WHERE id = %s AND status = %s", [
                ops.adapt_datetimefield_value(deadline), instance_pk, InstanceStatus.QUEUED.value])
        return claim


def rate_window_sql(table: str, keyed: bool) -> str:
    """The start that fills a rate limit's window (of the workflow, or of its key), if any. Keyed, it says
    the key is not "" (none is), for SQLite to walk the index of keyed instances' starts."""
    by_key = "AND limit_key = %s AND NOT (limit_key = '') " if keyed else ""
    return (f"SELECT started_at FROM {table} WHERE workflow_name = %s {by_key}AND started_at > %s "
            "ORDER BY started_at DESC LIMIT 1 OFFSET %s")


def _counted(own: limits.WorkflowLimits, key: str) -> _Condition:
    """Which instances of the workflow its concurrency limit counts with one of key ``key``: those of
    the same key when the limit is keyed, or when the workflow has no key at all (every instance's is
    "", and the condition lets the key's index serve the count); all of them otherwise."""
    if own.concurrency_keyed or own.key is None:
        return _Condition(" AND {t}limit_key = %s", (key,))
    return _Condition("")


_LOCK_PREFIX = "django_workflows.shared.limits:"
_HELD = ("started_at", "deadline", "wake_at")


def hand_on(workflow_name: str, own: limits.WorkflowLimits, key: str, now: datetime) -> list[int]:
    """The instances to queue a replay of now that a replay of the workflow, of limit key ``key``, gave
    back its concurrency slot: those queued first in their turn (priority, then age) among the
    instances the limit counts with it, as many as slots are free. One statement; the caller enqueues
    them.

    Several replays ending at once may each name the same instance (a duplicate delivery, which does
    nothing); the last of them to read sees every slot freed, so no free slot is left without a replay
    on its way while instances wait for one."""
    concurrency = own.concurrency
    if concurrency is None:
        return []
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(Instance._meta.db_table)
    stamp = ops.adapt_datetimefield_value(now)
    counted = _counted(own, key)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, (SELECT COUNT(*) FROM {table} s WHERE s.workflow_name = %s{counted.on('s')} AND "
            f"{holds_slot_sql('s')}) FROM {table} WHERE workflow_name = %s{counted.sql} AND status = %s "
            "ORDER BY turn_at, id LIMIT %s",
            [workflow_name, *counted.params, *_holds_slot_params(stamp), workflow_name, *counted.params,
             InstanceStatus.QUEUED.value, concurrency],
        )
        found = cursor.fetchall()
    if not found:
        return []
    free = max(concurrency - found[0][1], 0)
    return [pk for pk, _ in found[:free]]


def slot_counts(workflow_name: str, now: datetime) -> dict[str, int]:
    """How many instances of the workflow hold a concurrency slot (``running``) and are queued."""
    holding = Instance.objects.filter(
        workflow_name=workflow_name,
        status__in=(InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE), lease_expires_at__gte=now,
    ).count()
    queued = Instance.objects.filter(workflow_name=workflow_name, status=InstanceStatus.QUEUED).count()
    return {"running": holding, "queued": queued}
