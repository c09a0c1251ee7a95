"""Retention: deleting finished instances older than ``RETENTION_DAYS``, with their journal and inbox.

Batched (``RETENTION_BATCH`` instances a transaction), read through the ``dw_instance_ended`` index,
nothing loaded into Python, and each DELETE re-checks the instance's status and end time, so that an
instance restarted meanwhile keeps its new journal and inbox. ``workflows_worker`` runs it on a thread
of its own, off the wake-up loop.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

from django.db import connections, router, transaction

from django_workflows import clock
from django_workflows.conf import workflow_settings
from django_workflows.models import FINISHED_STATUSES, Event, Instance, Step


def _finished_before(cutoff: datetime):
    return Instance.objects.filter(status__in=FINISHED_STATUSES, ended_at__lt=cutoff)


def purge_cutoff(now: datetime | None = None) -> datetime | None:
    """Instances finished before this are deleted by retention; None if retention is off."""
    days = workflow_settings.RETENTION_DAYS
    if days is None:
        return None
    return (now or clock.now()) - timedelta(days=days)


def next_purge_batch(cutoff: datetime) -> list[int]:
    """The ids of up to ``RETENTION_BATCH`` instances finished before ``cutoff``.

    A plain read of the ``dw_instance_ended`` index that stops after the batch, outside any transaction:
    it locks nothing, and an instance restarted after it was read is found out by ``delete_finished``.
    In no particular order: ordering by end time would sort every finished instance of the backlog
    (three statuses' ranges of the index) for each batch, and every one of them is deleted anyway."""
    return list(
        _finished_before(cutoff).order_by().values_list("pk", flat=True)[: workflow_settings.RETENTION_BATCH]
    )


def delete_finished(pks, cutoff: datetime) -> int:
    """Delete those of the instances ``pks`` that are still finished before ``cutoff``, with their inbox
    and journal, in one transaction; return how many instances were deleted.

    Each DELETE re-checks the instance's status and end time itself (``... WHERE instance_id IN (SELECT
    id FROM instance WHERE id IN (...) AND status IN (...) AND ended_at < cutoff)``), so an instance
    restarted since its id was read keeps its new journal and inbox. Nothing is loaded into Python:
    the rows are deleted by the database, not collected by Django (its cascade would read every step).
    """
    alias = router.db_for_write(Instance)
    with transaction.atomic(using=alias):
        if connections[alias].features.has_select_for_update:
            # Lock the instances first, skipping those a restart (or another worker's purge) holds: a
            # restart then waits for this transaction and finds its instance gone, and this never waits
            # for a restart that waits for it (the deletes below would otherwise deadlock with
            # restart()'s own deletes of the journal). SQLite has one writer: the transaction is it.
            pks = list(_finished_before(cutoff).filter(pk__in=pks).select_for_update(skip_locked=True)
                       .values_list("pk", flat=True))
            if not pks:
                return 0
        still_finished = _finished_before(cutoff).filter(pk__in=pks)
        # The inbox first (a consumed event points at its step), then the journal, then the instances.
        Event.objects.filter(instance__in=still_finished.values("pk"))._raw_delete(alias)
        Step.objects.filter(instance__in=still_finished.values("pk"))._raw_delete(alias)
        return still_finished._raw_delete(alias)


def purge_finished(now: datetime | None = None, *, pause: float = 0.0,
                   stop: threading.Event | None = None) -> int:
    """Delete finished instances older than ``RETENTION_DAYS``, with their journal and inbox, in
    batches of ``RETENTION_BATCH``, one transaction each; return how many. Live instances are never
    read or locked.

    ``pause`` seconds pass between two batches, so that other writers get the database (SQLite has
    one writer at a time), and no batch is started once ``stop`` is set."""
    cutoff = purge_cutoff(now)
    if cutoff is None:
        return 0
    purged = 0
    while stop is None or not stop.is_set():
        batch = next_purge_batch(cutoff)
        deleted = delete_finished(batch, cutoff) if batch else 0
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
