"""Sending an event to an instance: what ``InstanceHandle.send_event`` does, the one path that Python
code, the API, a signed webhook, the admin and the command line each take once per event. In order,
each refusal raised before anything is stored:

1. the type is an event type (``InvalidEventType``);
2. the sender may send it. Through any channel but Python, and from Python too when a user is named:
   the user holds ``django_workflows.send_event``, and the workflow's declared events let this channel
   and this user send this type (``EventRefused``). Python code that names no user is trusted;
3. the payload is JSON within ``MAX_EVENT_PAYLOAD_SIZE`` (``InvalidEvent``, ``EventTooLarge``) and, for
   a workflow that declares its events, of a declared type and matching its schema
   (``InvalidEventType``, ``InvalidPayload``);
4. an idempotency key is well formed (``InvalidIdempotencyKey``).

Then the event is stored in the inbox, at most once per idempotency key or signed delivery, with who sent
it for the audit trail (``Event.sender``), and its instance is woken if it waits for the type. The
workflow's class, which holds the declaration, is looked up once for all of it.
"""

from __future__ import annotations

import json

from typing import Any

from django.db import IntegrityError

from django_workflows.shared import audit, clock, declared_events, large_values, workflow_access as access
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import registry
from django_workflows.errors import (
    DuplicateDelivery,
    EventPermissionRequired,
    EventTooLarge,
    IdempotencyKeyReused,
    InboxFull,
    InstanceFinished,
    InstanceNotFound,
    InvalidEvent,
    WorkflowNotFound,
)
from django_workflows.models import FINISHED_STATUSES
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.serialization import NotJournalable, canonical_digest, dump, is_plain
from django_workflows.store import inbox
from django_workflows.foundations.validation import validate_event_type, validate_idempotency_key

SEND_EVENT_PERMISSION = "django_workflows.send_event"
"""What a person needs to send any event, whatever the channel; a declared type may need more."""


class SentEvent(int):
    """What ``send_event`` returns: the stored event's id (an ``int``, as it always was), with what was
    recorded of its sending: ``sender``, who it is recorded as sent by (``Event.sender``), and
    ``repeated``, True when a repeat under an idempotency key was answered with the first event's id
    and nothing was stored."""

    sender: str
    repeated: bool

    def __new__(cls, event_id: int, sender: str = "", repeated: bool = False) -> SentEvent:
        # Defaults, because pickle and copy make one again from the id alone, then restore the rest.
        sent = super().__new__(cls, event_id)
        sent.sender, sent.repeated = sender, repeated
        return sent

    @property
    def event_id(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"SentEvent({int(self)}, sender={self.sender!r}, repeated={self.repeated})"


def send(instance, type: str, payload: Any, *, channel: str, user, sender: str | None,  # noqa: A002
         delivery: str | None, idempotency_key: str | None) -> SentEvent:
    """Send the event to ``instance`` (an ``InstanceHandle``), as ``send_event`` documents."""
    validate_event_type(type)
    # The class the handle was found through, else looked up now (the admin's handles are built from a
    # row): once, for the authorization, the arrival check and the quotas.
    options = _options_of(instance)
    rules = declared_events.rules_of(instance.workflow_name) if options is None else options.events
    trusted = user is None and channel == declared_events.PYTHON
    if not trusted:
        _authorize(rules, instance.workflow_name, type, channel, user)
    # From here on the payload is its journal form: typed values tagged, and a dict of the sender's that
    # uses the reserved key escaped, so that JSON from the API is never read back as a typed value.
    # A declared schema describes the payload as sent: JSON as it came, a typed value as the journal writes it.
    payload_text, stored = _check_payload(type, payload)
    declared_events.check_arrival(rules, instance.workflow_name, type, payload if is_plain(payload) else stored)
    payload = stored
    if sender is None:
        sender = "" if user is None else audit.user_sender(channel, user)
    # Only what is remembered (a signed delivery, a keyed send) needs its payload's digest.
    digest = canonical_digest(payload) if delivery is not None or idempotency_key is not None else ""
    # A signed delivery is known by its signature, whatever key it carries; a key, by its channel's.
    signed = None if delivery is None else inbox.Received(delivery, digest)
    keyed = None
    if idempotency_key is not None:
        validate_idempotency_key(idempotency_key)
        keyed = inbox.Received(inbox.idempotent_delivery(channel, instance.pk, idempotency_key), digest)
        # A repeat is answered from what the inbox was sent before anything else, so that it gets the
        # first answer even if that event has since finished the instance, or a restart deleted it.
        first = _repeat_of(instance, keyed, type, signed, idempotency_key)
        if first is not None:
            return SentEvent(first, sender, repeated=True)
    quotas = _quotas(options, type, channel, trusted)
    try:
        stored = _store(instance, type, _inbox_payload(instance, payload, payload_text), sender,
                        [d for d in (signed, keyed) if d is not None], quotas)
    except IntegrityError:
        # The unique delivery key decides, not a look beforehand: a concurrent twin of this request may
        # have been stored in between.
        if keyed is not None and idempotency_key is not None:
            first = _repeat_of(instance, keyed, type, signed, idempotency_key)
            if first is not None:
                return SentEvent(first, sender, repeated=True)
        if signed is None or not inbox.delivery_seen(signed.key):
            raise
        raise _duplicate(instance, type, signed) from None
    return SentEvent(stored, sender)


def _options_of(instance) -> WorkflowOptions | None:
    workflow_class = instance.workflow_class
    if workflow_class is None:
        try:
            workflow_class = registry.get(instance.workflow_name)
        except WorkflowNotFound:
            return None  # a workflow no longer defined: its instances can still be sent events
    return WorkflowOptions.of(workflow_class)


def _quotas(options: WorkflowOptions | None, event_type: str, channel: str, trusted: bool) -> inbox.Quotas:
    total = workflow_settings.MAX_PENDING_EVENTS
    if trusted:
        # The project's own code is bound only by the inbox's size, as it always was.
        return inbox.Quotas(total, None, None)
    approval = options is not None and event_type in options.approval_types
    return inbox.Quotas(total, workflow_settings.MAX_PENDING_EVENTS_PER_SENDER,
                        workflow_settings.MAX_PENDING_EVENTS_PER_TYPE,
                        urgent=approval or channel == declared_events.WEBHOOK)


def authorize(workflow_name: str, type: str, channel: str, user) -> None:  # noqa: A002
    """Refuse, as ``send`` would, an event this user may not send to any of the workflow's instances:
    what a surface checks before it looks the instance up, so that a refusal is the same whether the
    instance exists or not."""
    validate_event_type(type)
    _authorize(declared_events.rules_of(workflow_name), workflow_name, type, channel, user)


def _authorize(rules, workflow_name: str, event_type: str, channel: str, user) -> None:
    if user is not None and not user.has_perm(SEND_EVENT_PERMISSION):
        raise EventPermissionRequired(
            f"User {user.get_username() or 'anonymous'!r} lacks the permission {SEND_EVENT_PERMISSION}, which "
            "sending any event needs.",
            event_type=event_type, permission=SEND_EVENT_PERMISSION,
        )
    if not access.may_use_workflow(user, access.SEND, workflow_name):
        needed = access.permission(access.SEND, workflow_name)
        raise EventPermissionRequired(
            f"User {user.get_username() or 'anonymous'!r} lacks the permission {needed}, which sending events "
            f"to workflow {workflow_name!r} needs (WORKFLOW_PERMISSIONS).",
            event_type=event_type, permission=needed,
        )
    declared_events.authorize(rules, event_type, channel, user)


def _check_payload(event_type: str, payload: Any) -> tuple[str, Any]:
    try:
        return dump(payload, workflow_settings.MAX_EVENT_PAYLOAD_SIZE)
    except NotJournalable as exc:
        refusal = EventTooLarge if exc.too_large else InvalidEvent
        raise refusal(f"The payload of event {event_type!r} {exc}", too_large=exc.too_large) from None


def _inbox_payload(instance, payload: Any, text: str) -> Any:
    """The payload as the inbox keeps it: itself, or a reference to the file a large one went to."""
    kept = large_values.offload(text, instance.pk)
    return payload if kept is text else json.loads(kept)


def _duplicate(instance, type, signed: inbox.Received) -> DuplicateDelivery:  # noqa: A002
    return DuplicateDelivery(
        f"This delivery of event {type!r} was already received; nothing was stored again.",
        workflow=instance.workflow_name, instance_id=instance.id, delivery=signed.key,
    )


def _repeat_of(instance, keyed: inbox.Received, type, signed: inbox.Received | None,  # noqa: A002
               key: str) -> int | None:
    """The id of the event first stored under ``keyed``, if any; then a signed repeat (a provider's
    retry, signed anew) is remembered too, so that its own bytes cannot be taken elsewhere later."""
    stored = inbox.stored_delivery(keyed.key)
    if stored is None:
        return None
    if signed is not None and inbox.delivery_seen(signed.key):
        # The signature first: the same signed bytes are the same delivery, whatever they are posted as.
        raise _duplicate(instance, type, signed)
    event_id, stored_type, stored_digest = stored
    if stored_type != type or stored_digest != keyed.payload_digest:
        raise IdempotencyKeyReused(
            f"Idempotency key {key!r} was used for another event (type {stored_type!r}) or another "
            "payload on this instance; nothing was stored. Use a new key for a new event.",
            workflow=instance.workflow_name, instance_id=instance.id, event_id=event_id,
        )
    if signed is not None:
        try:
            inbox.remember(instance.pk, event_id, type, [signed], clock.now())
        except IntegrityError:
            raise _duplicate(instance, type, signed) from None
    return event_id


def _store(instance, type, payload, sender: str, deliveries: list[inbox.Received],  # noqa: A002
           quotas: inbox.Quotas) -> int:
    status, event_id = inbox.deliver(instance.pk, type, payload, sender=sender, deliveries=deliveries,
                                     now=clock.now(), quotas=quotas)
    name = f"{instance.workflow_name}/{instance.id}"
    if isinstance(status, inbox.QuotaReached):
        raise _inbox_full(instance, name, type, sender, status)
    if status is None:
        raise InstanceNotFound(f"Instance {name} no longer exists.",
                               workflow=instance.workflow_name, instance_id=instance.id)
    if status in FINISHED_STATUSES:
        raise InstanceFinished(
            f"Cannot send event {type!r} to instance {name}: it is {status} and will not wait for events again.",
            workflow=instance.workflow_name, instance_id=instance.id, status=status, action="send_event",
        )
    assert event_id is not None  # stored: the instance exists, its inbox had room
    return event_id


def _inbox_full(instance, name: str, type: str, sender: str, reached: inbox.QuotaReached) -> InboxFull:  # noqa: A002
    held = {
        "sender": f"{reached.limit} events from sender {sender or '(Python code)'!r} (MAX_PENDING_EVENTS_PER_SENDER)",
        "type": f"{reached.limit} events of type {type!r} (MAX_PENDING_EVENTS_PER_TYPE)",
        "total": f"{reached.limit} events (MAX_PENDING_EVENTS)",
    }[reached.quota]
    return InboxFull(
        f"Instance {name} holds {held} no wait has taken yet; event {type!r} was not stored. Send it once "
        "the instance has consumed some, or look at why it does not wait for what is sent to it.",
        workflow=instance.workflow_name, instance_id=instance.id, limit=reached.limit, quota=reached.quota,
    )
