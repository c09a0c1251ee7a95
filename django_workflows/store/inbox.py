"""The event inbox: storing a delivered event within the inbox's quotas, remembering what it was sent,
waking its instance if it waits for that type, and discarding an event no wait has taken.

A replay's side of the inbox (consuming the oldest event a wait accepts, in the transaction that journals
it, and the check a replay makes as it suspends on a wait) is ``JournalWriter``'s, under its lease.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction
from django.db.models import Count, Q

from django_workflows.executors import enqueue
from django_workflows.models import FINISHED_STATUSES, Delivery, Event, Instance, InstanceStatus
from django_workflows.store import prepared

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


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


@dataclass(frozen=True)
class InboxEvent:
    """An event taken from the inbox by a wait."""

    id: int
    type: str
    payload: Any
    received_at: datetime


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

    Three statements for an event its instance waits for, two for one it does not, each SQL built once
    per database: the locked read of the instance's status, the event's INSERT, which counts the inbox
    against the quotas as it inserts, and the instance queued.
    """
    alias = router.db_for_write(Instance)
    connection = connections[alias]
    statements = _statements(connection)
    with transaction.atomic(using=alias), prepared.cursor(connection) as cursor:
        # Locking the row orders this event against a replay suspending on its wait: either the
        # replay's inbox check sees this event, or this sees the instance waiting and wakes it; and it
        # orders senders, so that each one's INSERT, a statement begun after the lock, counts the
        # events of those before it.
        row = prepared.first_row(cursor, statements.locked, [pk])
        if row is None or row[0] in FINISHED_STATUSES:
            return (None if row is None else row[0]), None
        status, waiting_for = row
        awaited = status == InstanceStatus.WAITING and type in _types(waiting_for)
        checked = _checked(quotas, urgent=quotas.urgent or awaited)
        inserted = prepared.first_row(cursor, statements.insert(tuple(quota for quota, _ in checked)), [
            pk, type, statements.payload(payload), statements.moment(now), sender,
            *(value for quota, limit in checked for value in (pk, *_counted_by(quota, sender, type), limit)),
        ])
        if inserted is None:
            return _refusal(pk, sender, type, checked), None
        event_id = inserted[0]
        remember(pk, event_id, type, deliveries, now)
        if awaited:
            # Queued, so that the sweeper re-enqueues it should the replay task be lost.
            # Its wake time goes: a queued instance keeps one only while a limit holds it back.
            cursor.execute(statements.queue, [InstanceStatus.QUEUED.value, statements.moment(now), pk])
            enqueue(pk)
        return status, event_id


def _checked(quotas: Quotas, urgent: bool) -> list[tuple[str, int]]:
    """The quotas that apply, with their limits: the sender's always, the type's and the total's unless
    the event is urgent."""
    checked = [("sender", quotas.per_sender)]
    if not urgent:
        checked += [("type", quotas.per_type), ("total", quotas.total)]
    return [(quota, limit) for quota, limit in checked if limit is not None]


def _counted_by(quota: str, sender: str, type: str) -> tuple[Any, ...]:  # noqa: A002
    return {"sender": (sender,), "type": (type,), "total": ()}[quota]


def _refusal(pk: int, sender: str, type: str, checked: list[tuple[str, int]]) -> QuotaReached:  # noqa: A002
    """Which of the ``checked`` quotas refused the event: counted again, in the same transaction. An event
    discarded meanwhile (the admin's discard locks the events, not the instance) may have made room since
    the INSERT counted: the quota nearest its limit is named then, the first of them on a tie."""
    events = Event.objects.filter(instance_id=pk, consumed_by__isnull=True)
    counts = events.aggregate(total=Count("id"), sender=Count("id", filter=Q(sender=sender)),
                              type=Count("id", filter=Q(type=type)))
    quota, limit = max(checked, key=lambda checked_quota: counts[checked_quota[0]] - checked_quota[1])
    return QuotaReached(quota, limit)


def _types(waiting_for: Any) -> Sequence[str]:
    """The event types a waiting instance waits for, as its ``waiting_for`` column reads raw: JSON text
    (SQLite, and PostgreSQL's ``jsonb`` as Django loads it), or None."""
    if waiting_for is None:
        return ()
    types: Sequence[str] = json.loads(waiting_for) if isinstance(waiting_for, str) else waiting_for
    return types


class _Statements:
    """The inbox's statements on one database, built once."""

    def __init__(self, connection: BaseDatabaseWrapper):
        ops = connection.ops
        instances, events = ops.quote_name(Instance._meta.db_table), ops.quote_name(Event._meta.db_table)
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self.locked = f"SELECT status, waiting_for FROM {instances} WHERE id = %s{lock}"
        self.queue = f"UPDATE {instances} SET status = %s, wake_at = NULL, updated_at = %s WHERE id = %s"
        self._events = events
        self._inserts: dict[tuple[str, ...], str] = {}
        payload, received_at = Event._meta.get_field("payload"), Event._meta.get_field("received_at")
        self.payload = functools.partial(payload.get_db_prep_save, connection=connection)
        self.moment = functools.partial(received_at.get_db_prep_save, connection=connection)

    def insert(self, quotas: tuple[str, ...]) -> str:
        """The event's INSERT, inserting nothing where one of ``quotas`` is reached: the unconsumed events
        of the instance (the inbox's partial index holds exactly those), of the sender or of the type."""
        sql = self._inserts.get(quotas)
        if sql is None:
            unconsumed = f"SELECT COUNT(*) FROM {self._events} u WHERE u.instance_id = %s AND u.consumed_by_id IS NULL"
            within = {"sender": f"({unconsumed} AND u.sender = %s) < %s",
                      "type": f"({unconsumed} AND u.type = %s) < %s",
                      "total": f"({unconsumed}) < %s"}
            where = f" WHERE {' AND '.join(within[quota] for quota in quotas)}" if quotas else ""
            sql = self._inserts[quotas] = (
                f"INSERT INTO {self._events} (instance_id, type, payload, received_at, sender) "
                f"SELECT %s, %s, %s, %s, %s{where} RETURNING id"
            )
        return sql


_built: dict[str, _Statements] = {}


def _statements(connection: BaseDatabaseWrapper) -> _Statements:
    statements = _built.get(connection.alias)
    if statements is None:
        statements = _built[connection.alias] = _Statements(connection)
    return statements


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
