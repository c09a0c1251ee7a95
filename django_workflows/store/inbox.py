"""The event inbox: storing a delivered event within the inbox's quotas, remembering what it was sent,
waking its instance if it waits for that type, and discarding an event no wait has taken.

A replay's side of the inbox (consuming the oldest event a wait accepts, in the transaction that journals
it, and the check a replay makes as it suspends on a wait) is ``JournalWriter``'s, under its lease.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import router, transaction
from django.db.models import Count, Q

from django_workflows.executors import enqueue
from django_workflows.models import FINISHED_STATUSES, Delivery, Event, Instance, InstanceStatus


@dataclass(frozen=True)
class Quotas:
    """How many unconsumed events an inbox holds before it refuses one more; None for no quota.

    ``per_sender`` counts the events of the event's own sender, ``per_type`` those of its type,
    ``total`` all of them. An event that is ``urgent`` (an approval, a signed webhook) or of a type
    the instance waits for now is refused only by its sender's own quota: other senders filling the
    inbox cannot keep it out."""

    total: int | None
    per_sender: int | None
    per_type: int | None
    urgent: bool = False


NO_QUOTAS = Quotas(None, None, None)


@dataclass(frozen=True)
class QuotaReached:
    """Why an event was not stored: which quota (``"sender"``, ``"type"``, ``"total"``) and its limit."""

    quota: str
    limit: int


@dataclass(frozen=True)
class Received:
    """What a delivery is remembered by (``Delivery.key``) and what it stored, to know it again."""

    key: str
    payload_digest: str


def deliver(pk: int, type: str, payload: Any, *, sender: str, now: datetime,  # noqa: A002
            deliveries: Sequence[Received] = (), quotas: Quotas = NO_QUOTAS,
            ) -> tuple[str | QuotaReached | None, int | None]:
    """Store the event, remember ``deliveries`` as having stored it, and, if the instance waits for its
    type, queue the instance and its replay.

    Returns the status the instance had (None if it no longer exists, a finished status if it will
    never wait again: the event is then not stored, nor when a quota refuses it: ``QuotaReached``) and
    the stored event's id. A delivery received before raises ``IntegrityError``, and nothing is stored.
    """
    rows = Instance.objects.filter(pk=pk)
    with transaction.atomic(using=router.db_for_write(Instance)):
        # Locking the row orders this event against a replay suspending on its wait: either the
        # replay's inbox check sees this event, or this sees the instance waiting and wakes it.
        row = rows.select_for_update().values("status", "waiting_for").first()
        if row is None or row["status"] in FINISHED_STATUSES:
            return (None if row is None else row["status"]), None
        awaited = row["status"] == InstanceStatus.WAITING and type in (row["waiting_for"] or ())
        refused = _over_quota(pk, type, sender, quotas, urgent=quotas.urgent or awaited)
        if refused is not None:
            return refused, None
        event = Event.objects.create(instance_id=pk, type=type, payload=payload, received_at=now, sender=sender)
        remember(pk, event.pk, type, deliveries, now)
        if awaited:
            # Queued, so that the sweeper re-enqueues it should the replay task be lost.
            # Its wake time goes: a queued instance keeps one only while a limit holds it back.
            rows.update(status=InstanceStatus.QUEUED, wake_at=None, updated_at=now)
            enqueue(pk)
        return row["status"], event.pk


def _over_quota(pk: int, type: str, sender: str, quotas: Quotas, urgent: bool) -> QuotaReached | None:  # noqa: A002
    # One query for the three counts. The inbox's partial index holds exactly the unconsumed events,
    # and the quotas keep them few: ordinary events to ``total``, the rest to ``per_sender`` a sender.
    counts = Event.objects.filter(instance_id=pk, consumed_by__isnull=True).aggregate(
        total=Count("id"), sender=Count("id", filter=Q(sender=sender)), type=Count("id", filter=Q(type=type)),
    )
    checked = [("sender", quotas.per_sender)]
    if not urgent:
        checked += [("type", quotas.per_type), ("total", quotas.total)]
    for quota, limit in checked:
        if limit is not None and counts[quota] >= limit:
            return QuotaReached(quota, limit)
    return None


def remember(pk: int, event_id: int, type: str, deliveries: Sequence[Received], now: datetime) -> None:  # noqa: A002
    """Record ``deliveries`` as having stored the event ``event_id``; one received before raises
    ``IntegrityError`` (the unique key decides, so two racing copies cannot both pass)."""
    if deliveries:
        with transaction.atomic(using=router.db_for_write(Delivery)):
            Delivery.objects.bulk_create([
                Delivery(key=d.key, instance_id=pk, event_id=event_id, type=type, payload_digest=d.payload_digest,
                         received_at=now) for d in deliveries
            ])


def idempotent_delivery(channel: str, pk: int, key: str) -> str:
    """The key of an idempotency key: one per channel, instance and key, so that a person's key through
    the API never stands for a provider's through its webhook, nor the other way round."""
    # Written over the key's digest of the previous release, so that 0020 could carry those over.
    former = hashlib.sha256(f"idempotency:{pk}:{key}".encode()).hexdigest()
    return hashlib.sha256(f"idempotency:{channel}:{former}".encode()).hexdigest()


def delivery_seen(key: str) -> bool:
    return Delivery.objects.filter(key=key).exists()


def stored_delivery(key: str) -> tuple[int, str, str] | None:
    """``(event id, type, payload digest)`` of the event the delivery ``key`` stored, if any."""
    return Delivery.objects.filter(key=key).values_list("event_id", "type", "payload_digest").first()


def discard(pk: int, event_ids: list[int] | None = None, sender: str | None = None) -> list[tuple[int, str, str]]:
    """Delete the instance's unconsumed events ``event_ids``, or all those of ``sender``; an event a wait
    took meanwhile stays. Returns ``(id, type, sender)`` of each one deleted, for the audit."""
    events = Event.objects.filter(instance_id=pk, consumed_by__isnull=True)
    events = events.filter(pk__in=event_ids) if event_ids is not None else events.filter(sender=sender)
    with transaction.atomic(using=router.db_for_write(Event)):
        # Locked, then deleted by id: the same rows are reported as are deleted.
        found = list(events.select_for_update().values_list("id", "type", "sender"))
        Event.objects.filter(pk__in=[event_id for event_id, _, _ in found]).delete()
    return found
