"""The event inbox: storing a delivered event, and waking its instance if it waits for that type.

A replay's side of the inbox (consuming the oldest event a wait accepts, in the transaction that journals
it, and the check a replay makes as it suspends on a wait) is ``JournalWriter``'s, under its lease.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.db import router, transaction

from django_workflows.executors import enqueue
from django_workflows.models import FINISHED_STATUSES, Event, Instance, InstanceStatus


def deliver(pk: int, type: str, payload: Any, *, sender: str, delivery: str | None,  # noqa: A002
            now: datetime, pending_limit: int | None = None) -> tuple[str | None, int | None]:
    """Store the event and, if the instance waits for its type, queue the instance and its replay.

    Returns the status the instance had (None if it no longer exists, a finished status if it will
    never wait again: the event is then not stored, nor when the inbox holds ``pending_limit`` unconsumed
    events already: ``INBOX_FULL``) and the stored event's id. A ``delivery`` seen before raises
    ``IntegrityError``.
    """
    rows = Instance.objects.filter(pk=pk)
    with transaction.atomic(using=router.db_for_write(Instance)):
        # Locking the row orders this event against a replay suspending on its wait: either the
        # replay's inbox check sees this event, or this sees the instance waiting and wakes it.
        row = rows.select_for_update().values("status", "waiting_for").first()
        if row is None or row["status"] in FINISHED_STATUSES:
            return (None if row is None else row["status"]), None
        if pending_limit is not None and _pending(pk, pending_limit) >= pending_limit:
            return INBOX_FULL, None
        event = Event.objects.create(instance_id=pk, type=type, payload=payload, received_at=now, sender=sender,
                                     delivery=delivery)
        if row["status"] == InstanceStatus.WAITING and type in (row["waiting_for"] or ()):
            # Queued, so that the sweeper re-enqueues it should the replay task be lost.
            rows.update(status=InstanceStatus.QUEUED, updated_at=now)
            enqueue(pk)
        return row["status"], event.pk


INBOX_FULL = "inbox full"


def _pending(pk: int, limit: int) -> int:
    # Counted up to the limit only (the inbox's partial index holds exactly the unconsumed events), so
    # a full inbox costs no more to refuse than a nearly empty one costs to accept.
    return Event.objects.filter(instance_id=pk, consumed_by__isnull=True).values("id")[:limit].count()


def delivery_seen(delivery: str) -> bool:
    return Event.objects.filter(delivery=delivery).exists()


def idempotent_delivery(pk: int, key: str) -> str:
    """The ``delivery`` of the event stored under an idempotency key: one per instance and key."""
    return hashlib.sha256(f"idempotency:{pk}:{key}".encode()).hexdigest()


def stored_delivery(delivery: str) -> tuple[int, str, Any] | None:
    """``(id, type, payload)`` of the event stored with ``delivery``, if any."""
    return Event.objects.filter(delivery=delivery).values_list("id", "type", "payload").first()
