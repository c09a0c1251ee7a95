"""Retention: deleting finished instances, with their journal, their inbox and what it was sent, once they
have been kept long enough: ``RETENTION_DAYS`` after they ended, or as long as their own retention says.

An instance may choose its own retention at create (``create(retention={"success": ..., "error":
...})``): ``complete`` keeps it for its success retention, ``errored`` and ``terminated`` for its error
retention. The moment it is due is written as it ends (``purge_at``), in the statement that ends it,
from durations the replay's claim has read already: no statement more. An instance without its own
retention for how it ended has no ``purge_at`` and follows ``RETENTION_DAYS``, read at each sweep.

Batched (``RETENTION_BATCH`` instances a transaction), read through the ``dw_instance_purge``
index, nothing loaded into Python, and each DELETE re-checks the instance's status and retention, so
that an instance restarted meanwhile keeps its new journal and inbox. ``workflows_worker`` runs it on a
thread of its own, off the wake-up loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet, Value

if TYPE_CHECKING:
    from django.db.models.expressions import CombinedExpression

from django_workflows.shared import clock, large_values
from django_workflows.foundations.conf import workflow_settings
from django_workflows.models import FINISHED_STATUSES, Delivery, Event, Instance, InstanceStatus, InstanceTag, Step


def own_purge_at(status: str, ended_at: datetime, success_retention: timedelta | None,
                 error_retention: timedelta | None) -> datetime | None:
    """When an instance that ended ``status`` at ``ended_at`` is deleted by its own retention: a
    ``complete`` one its success retention later, an ``errored`` or ``terminated`` one its error
    retention later; None if it chose none for that outcome (``RETENTION_DAYS`` then applies)."""
    retention = success_retention if status == InstanceStatus.COMPLETE else error_retention
    return None if retention is None else ended_at + retention


def terminated_purge_at(now: datetime) -> ExpressionWrapper[CombinedExpression]:
    """``own_purge_at`` for an UPDATE that terminates instances at ``now``, computed by the database
    from each row's own error retention (NULL where it has none)."""
    return ExpressionWrapper(Value(now, output_field=DateTimeField()) + F("error_retention"),
                             output_field=DateTimeField())


def _finished() -> QuerySet[Instance]:
    return Instance.objects.filter(status__in=FINISHED_STATUSES)


def due_by_own_retention(now: datetime) -> QuerySet[Instance]:
    """Finished instances whose own retention ran out before ``now``. A purge time is set only together
    with an end time; saying so lets the read use the retention index, which holds ended instances only."""
    return _finished().filter(purge_at__lt=now, ended_at__isnull=False)


def due_by_setting(cutoff: datetime) -> QuerySet[Instance]:
    """Finished instances without a retention of their own that ended before ``cutoff``."""
    return _finished().filter(purge_at__isnull=True, ended_at__lt=cutoff)


def purge_cutoff(now: datetime | None = None) -> datetime | None:
    """Instances without their own retention that finished before this are deleted by retention; None
    if ``RETENTION_DAYS`` is off (instances with their own retention are deleted all the same)."""
    days = workflow_settings.RETENTION_DAYS
    if days is None:
        return None
    return (now or clock.now()) - timedelta(days=days)


def next_purge_batch(due: QuerySet[Instance]) -> list[int]:
    """The ids of up to ``RETENTION_BATCH`` of the ``due`` instances.

    A plain read of the ``dw_instance_purge`` index that stops after the batch, outside any
    transaction: it locks nothing, and an instance restarted after it was read is found out by
    ``delete_finished``. One statement, a read per finished status, each in the index's own order (the
    status fixed, then its retention time and end time), so that each is a walk along one range of the
    index that stops after the batch. Without an order, PostgreSQL's planner, which expects the due
    instances to be spread evenly through the table, reads the table from its start instead, and on a
    table of millions that may read most of it for every batch; ordering the three statuses' ranges
    together would sort every due instance of the backlog for each batch."""
    size = workflow_settings.RETENTION_BATCH
    parts: list[str] = []
    params: list[Any] = []
    for status in FINISHED_STATUSES:
        reads = due.filter(status=status).order_by("purge_at", "ended_at").values_list("pk", flat=True)[:size]
        sql, own = reads.query.sql_with_params()
        parts.append(f"SELECT * FROM ({sql}) AS due_{status}")
        params.extend(own)
    with connections[due.db].cursor() as cursor:
        cursor.execute(f"{' UNION ALL '.join(parts)} LIMIT {int(size)}", params)
        return [pk for (pk,) in cursor.fetchall()]


def delete_finished(pks: Iterable[int], due: QuerySet[Instance]) -> int:
    """Delete those of the instances ``pks`` that are still ``due``, with their inbox, journal and tags, in
    one transaction; return how many instances were deleted.

    Each DELETE re-checks the instance's status and retention itself (``... WHERE instance_id IN
    (SELECT id FROM instance WHERE id IN (...) AND status IN (...) AND purge_at < now)``, or ``purge_at
    IS NULL AND ended_at < cutoff``), so an instance restarted since its id was read keeps its new
    journal and inbox. Nothing is loaded into Python: the rows are deleted by the database, not
    collected by Django (its cascade would read every step).
    """
    alias = router.db_for_write(Instance)
    with transaction.atomic(using=alias):
        if connections[alias].features.has_select_for_update:
            # Lock the instances first, skipping those a restart (or another worker's purge) holds: a
            # restart then waits for this transaction and finds its instance gone, and this never waits
            # for a restart that waits for it (the deletes below would otherwise deadlock with
            # restart()'s own deletes of the journal). SQLite has one writer: the transaction is it.
            pks = list(due.filter(pk__in=pks).select_for_update(skip_locked=True)
                       .values_list("pk", flat=True))
            if not pks:
                return 0
        still_due = due.filter(pk__in=pks)
        transaction.on_commit(_delete_files, using=alias)
        # The inbox and what it was sent first (a consumed event points at its step), then the journal, then the instances.
        Event.objects.filter(instance__in=still_due.values("pk"))._raw_delete(alias)
        Delivery.objects.filter(instance__in=still_due.values("pk"))._raw_delete(alias)
        InstanceTag.objects.filter(instance__in=still_due.values("pk"))._raw_delete(alias)
        Step.objects.filter(instance__in=still_due.values("pk"))._raw_delete(alias)
        return still_due._raw_delete(alias)


def _delete_files() -> None:
    """Once a batch committed, delete the large values' files of every instance that is gone: this batch's,
    and those of an earlier batch whose worker was killed between its commit and this (their rows are
    gone, so nothing else would find them). A file is never missing for a row kept (restarted meanwhile).
    A query only when the storage holds files."""
    with_files = large_values.instances_with_files()
    kept: set[int] = set()
    for first in range(0, len(with_files), 1000):
        kept.update(Instance.objects.filter(pk__in=with_files[first:first + 1000]).values_list("pk", flat=True))
    large_values.delete_files(pk for pk in with_files if pk not in kept)


def _purge(due: QuerySet[Instance], pause: float, stop: threading.Event | None) -> int:
    purged = 0
    while stop is None or not stop.is_set():
        batch = next_purge_batch(due)
        deleted = delete_finished(batch, due) if batch else 0
        purged += deleted
        # A batch of which nothing could be deleted is held by others (another worker's purge, a
        # restart): reading it again at once would only spin until they commit.
        if len(batch) < workflow_settings.RETENTION_BATCH or not deleted:
            break
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)
    return purged


def purge_finished(now: datetime | None = None, *, pause: float = 0.0,
                   stop: threading.Event | None = None) -> int:
    """Delete the finished instances whose retention ran out, with their journal and inbox, in batches
    of ``RETENTION_BATCH``, one transaction each; return how many. First those whose own retention
    ran out, then those without one that ended more than ``RETENTION_DAYS`` ago (none if it is None).
    Live instances are never read or locked.

    ``pause`` seconds pass between two batches, so that other writers get the database (SQLite has
    one writer at a time), and no batch is started once ``stop`` is set."""
    now = now or clock.now()
    cutoff = purge_cutoff(now)
    purged = _purge(due_by_own_retention(now), pause, stop)
    if cutoff is not None:
        purged += _purge(due_by_setting(cutoff), pause, stop)
    return purged
