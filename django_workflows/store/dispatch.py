"""The timers and the safety net: waking due instances, and re-enqueueing lost or orphaned replays.

Both are plain functions over the workflow tables, run by ``workflows_worker``'s
loops (and, as a slower fallback, by django-q2's scheduler under a plain
``qcluster``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db import connections, router, transaction
from django.db.models import Case, F, Value, When

from django_workflows.shared import clock, options, routing, rows
from django_workflows.shared.definition import registry
from django_workflows.foundations.conf import workflow_settings
from django_workflows.executors import enqueue_many
from django_workflows.models import Instance, InstanceStatus
from django_workflows.store import holders, leases, literals
from django_workflows.store.literals import Varying
from django_workflows.store.retention import purge_finished

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


# The statuses whose wake time the loop keeps: a waiting instance's next step, a scheduled one's start,
# and the deadline of a queued one that a concurrency limit holds back (``leases.hold``: its claim then
# takes it through the limit, to time it out). Each has a partial index of its own (dw_instance_wake,
# dw_instance_scheduled, dw_instance_held).
WOKEN_STATUSES = (InstanceStatus.WAITING, InstanceStatus.SCHEDULED, InstanceStatus.QUEUED)


def _claim_sql(connection: BaseDatabaseWrapper) -> str:
    table = connection.ops.quote_name(Instance._meta.db_table)
    # SKIP LOCKED lets several wake-up loops (one per machine) share the due instances
    # without waiting on each other; SQLite has one writer at a time anyway.
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    # One batch of each status, each read through its own partial index (an OR of the two would read
    # neither), in one statement: a derived table each, as a compound SELECT takes no LIMIT or FOR
    # UPDATE of its own parts.
    due = " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM {table} WHERE status = %s AND wake_at <= %s ORDER BY wake_at "
        f"LIMIT %s{lock}) AS due_{index}" for index in range(len(WOKEN_STATUSES))
    )
    statuses = ", ".join(["%s"] * len(WOKEN_STATUSES))
    # The wake time is cleared as it fires: a queued instance keeps one only while a limit holds it back.
    return (f"UPDATE {table} SET status = %s, wake_at = NULL, updated_at = %s "
            f"WHERE status IN ({statuses}) AND id IN ({due}) RETURNING id")


def wake_due(now: datetime | None = None) -> int:
    """Queue every waiting or scheduled instance whose wake time has passed, and every queued one held
    back by a concurrency limit whose deadline has, and enqueue its replay; return how many."""
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    now = now or clock.now()
    stamp = connection.ops.adapt_datetimefield_value(now)
    batch = workflow_settings.WAKE_BATCH
    woken = 0
    while True:
        with transaction.atomic(using=alias):
            with connection.cursor() as cursor:
                # The statuses and the batch written in (``literals``): on SQLite, a status bound as a
                # parameter beside the partial indexes on it prepares the statement again at every run.
                cursor.execute(*literals.bind(connection, _claim_sql(connection), [
                    InstanceStatus.QUEUED.value, Varying(stamp), *(status.value for status in WOKEN_STATUSES),
                    *(value for status in WOKEN_STATUSES for value in (status.value, Varying(stamp), batch)),
                ]))
                claimed = [row[0] for row in cursor.fetchall()]
            enqueue_many(claimed)
        woken += len(claimed)
        # Up to a batch of each status: fewer than one batch in all means none had more.
        if len(claimed) < batch:
            return woken


def _next_wake_sql(connection: BaseDatabaseWrapper) -> str:
    table = connection.ops.quote_name(Instance._meta.db_table)
    firsts = " OR ".join(f"id = (SELECT id FROM {table} WHERE status = %s AND wake_at IS NOT NULL "
                         "ORDER BY wake_at LIMIT 1)" for _ in WOKEN_STATUSES)
    return f"SELECT wake_at FROM {table} WHERE {firsts} ORDER BY wake_at LIMIT 1"


def next_wake_time() -> datetime | None:
    """The earliest wake time among waiting, scheduled and held queued instances: one statement, which
    finds the first of each status through its partial index and reads the earliest of those rows by
    primary key. Its text is built once, its statuses written in (``literals``): the wake-up loop asks
    after every change it is told of, and the ORM took a millisecond to compile it each time."""
    connection = connections[router.db_for_read(Instance)]
    with connection.cursor() as cursor:
        cursor.execute(*literals.bind(connection, _next_wake_sql(connection),
                                      [status.value for status in WOKEN_STATUSES]))
        row = cursor.fetchone()
    if row is None:
        return None
    wake_at: datetime | None = rows.reader(connection, Instance, ("wake_at",)).decode(row, connection)[0]
    return wake_at


def sweep(now: datetime | None = None) -> int:
    """Re-enqueue replays that will not happen otherwise; return how many.

    - an instance whose lease expired (its worker died mid-replay) is queued again, counting the crash
      unless the replay journaled a finished step,
      or, if it was waiting for a pause, paused; its epoch is bumped, as by a lease taken, so that the
      replay, if it was only frozen (a stopped process, a long pause of its machine) and resumes, has
      its next write refused: its journal, and the release that would end, suspend or resume the
      instance behind the sweeper's back (a pause undone), are fenced;
    - an instance queued for longer than ``REDISPATCH_SECONDS`` (its task was lost, as the Redis broker
      loses the task of a worker that dies) gets its replay enqueued again.
    """
    alias = router.db_for_write(Instance)
    now = now or clock.now()
    redispatched = 0
    with transaction.atomic(using=alias):
        expired = list(
            Instance.objects.expired_leases(now).select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[: workflow_settings.WAKE_BATCH]
        )
        if expired:
            Instance.objects.expired_leases(now).filter(pk__in=expired).update(
                status=Case(
                    When(status=InstanceStatus.WAITING_FOR_PAUSE, then=Value(InstanceStatus.PAUSED)),
                    default=Value(InstanceStatus.QUEUED),
                ),
                crash_count=leases.crash_counted(connections[alias]), epoch=F("epoch") + 1, lease_owner="",
                lease_expires_at=None, progressed_at=None, updated_at=now,
            )
            queued = list(Instance.objects.filter(pk__in=expired, status=InstanceStatus.QUEUED).values_list(
                "pk", flat=True
            ))
            enqueue_many(queued)
            redispatched += len(queued)
    slots = {name: own for name, own in options.limited().items() if own.concurrency is not None}
    slotted = sorted(slots)
    with transaction.atomic(using=alias):
        before = now - timedelta(seconds=workflow_settings.REDISPATCH_SECONDS)
        # The queued instances of a workflow with a concurrency limit may wait for a slot for a long
        # time, with no replay on its way: not lost ones. They are handed on below instead.
        # Only those this process could run: an instance of a class it does not know (a rolling deploy) or
        # of a queue it does not serve is left to the sweeps of the workers that can run it.
        left_queued = Instance.objects.stale_queued(before).filter(workflow_name__in=registry.names())
        served = routing.served()
        if served is not None:
            left_queued = left_queued.filter(queue__in=served)
        if slotted:
            left_queued = left_queued.exclude(workflow_name__in=slotted)
        stale = list(
            left_queued.select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[: workflow_settings.WAKE_BATCH]
        )
        if stale:
            Instance.objects.stale_queued(before).filter(pk__in=stale).update(updated_at=now)
            enqueue_many(stale)
            redispatched += len(stale)
    # The safety net of the hand-on at the end of each replay (a replay whose hand-on failed, a lost
    # task, a slot freed by a lease that expired): the first queued instances in their turn of each
    # workflow with a concurrency limit (of each of its keys, when keyed), one per free slot. One
    # statement to find which have queued instances (none without limits), then, for each, one for its
    # keys when keyed and one per key.
    for name in with_queued(slotted):
        own = slots[name]
        for key in queued_keys(name) if own.concurrency_keyed else [""]:
            with transaction.atomic(using=alias):
                handed = leases.hand_on(name, own, key, now)
                enqueue_many(handed)
            redispatched += len(handed)
    return redispatched


def queued_keys(workflow_name: str) -> list[str]:
    """The limit keys of the workflow's queued instances, for the sweeper's hand-on of each."""
    return sorted(set(Instance.objects.filter(workflow_name=workflow_name, status=InstanceStatus.QUEUED)
                      .values_list("limit_key", flat=True).distinct()))


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


def _reclaim_sql(connection: BaseDatabaseWrapper, owners: int) -> str:
    table = connection.ops.quote_name(Instance._meta.db_table)
    return (
        f"UPDATE {table} SET status = CASE WHEN status = %s THEN %s ELSE %s END, "
        f"epoch = epoch + 1, crash_count = ({leases.crash_counted_sql(connection)}), lease_owner = '', "
        "lease_expires_at = NULL, progressed_at = NULL, "
        "updated_at = %s "
        f"WHERE status IN (%s, %s) AND lease_owner IN ({', '.join(['%s'] * owners)}) RETURNING id, status"
    )


def reclaim_dead_leases(now: datetime | None = None) -> int:
    """Queue again at once the instances leased by processes of this host that are gone; return how many
    replays it enqueued.

    A worker restarted after a SIGKILL so resumes the instances its last run was replaying within
    seconds, not ``LEASE_SECONDS``. Each is treated as the sweeper treats an expired lease: queued
    again (or paused, if it was waiting for a pause) with the crash counted (unless the replay made
    progress, as at take-over). The epoch is bumped as
    well, so that a replay of the holder that somehow still runs is fenced at its next write.
    Leases of other hosts are left to expire: their processes cannot be seen from here.
    """
    host = holders.this_host()
    if "/" not in host:
        return 0  # no /proc: no process of ours can be judged gone
    leased = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)
    owners = set(
        Instance.objects.filter(status__in=leased, lease_owner__startswith=f"{host}:")
        .values_list("lease_owner", flat=True).distinct()
    )
    dead = []
    for owner in sorted(owners):
        holder = holders.Holder.parse(owner)
        if holder is not None and holder.host == host and holder.is_gone():
            dead.append(owner)
    if not dead:
        return 0
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    now = now or clock.now()
    reclaimed = 0
    with transaction.atomic(using=alias):
        with connection.cursor() as cursor:
            # One conditional statement: an instance whose lease changed hands since it was read
            # (released, or taken over) no longer names a dead holder, and is left alone.
            cursor.execute(_reclaim_sql(connection, len(dead)), [
                InstanceStatus.WAITING_FOR_PAUSE, InstanceStatus.PAUSED, InstanceStatus.QUEUED,
                connection.ops.adapt_datetimefield_value(now), *leased, *dead,
            ])
            rows = cursor.fetchall()
        queued = [pk for pk, status in rows if status == InstanceStatus.QUEUED]
        enqueue_many(queued)
        reclaimed += len(queued)
    return reclaimed


def tick() -> None:
    """One round of timers, schedules and sweeping: the fallback that django-q2's scheduler runs under
    ``qcluster``."""
    from django_workflows.store import schedules

    wake_due()
    reclaim_dead_leases()
    sweep()
    schedules.tick(clock.now())
    purge_finished()
