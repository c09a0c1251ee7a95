"""Declared events: the event types a workflow accepts, who may send each, and through which channel.

A workflow that sets ``events`` on its class accepts only the types it names::

    events = {
        "manager-approval": {"permission": "payments.approve_payment", "approval": True,
                             "schema": {"type": "object", "required": ["outcome"]}},
        "payment-succeeded": {"webhook": True},
    }

- an undeclared type is refused wherever it is sent (API, webhook, admin, CLI, ``send_event``), instead
  of sitting in the inbox until a wait's timeout; a ``wait_for_event`` of one is a definition error;
- ``permission``: a Django permission a person needs, beside ``django_workflows.send_event``, to send
  the type through the API, the admin or the CLI (``--user``);
- ``webhook``: the type comes from a provider and only signed, through the webhook endpoint; a person
  cannot send it through the authenticated API, the admin or the CLI. Conversely, when a workflow
  declares its events, its webhook endpoint takes only the types declared ``webhook``: a provider's
  secret is not a person's permission;
- ``schema``: a JSON Schema the payload must match when it arrives; a payload that does not is refused
  with the path that failed, and nothing is stored. A Pydantic model may be the schema: it validates the
  payload as it arrives (the inbox keeps the payload as sent), ``wait_for_event`` gives ``run()`` the
  model's instance as the event's payload, and the API's OpenAPI document shows the model's JSON Schema;
- ``approval``: the types the admin's Approve and Reject buttons send.

Python code calling ``send_event`` is trusted like the rest of the project's code: the type must be
declared and the payload must match, but no permission or channel applies, unless it names the user it
sends for (``send_event(..., user=...)``). ``django_workflows.client.sending`` applies these rules, for every
channel.
A workflow without ``events`` keeps the open behaviour: any valid type, from anyone with ``send_event``.

A class's declaration is read once (``WorkflowOptions.events``, through ``event_rules``); this module
applies it to each event sent.
"""

from __future__ import annotations

from typing import Any

from django_workflows.shared.definition import registry
from django_workflows.errors import (
    EventPermissionRequired,
    InvalidEventType,
    InvalidPayload,
    NotAWebhook,
    WebhookOnly,
    WorkflowNotFound,
)
from django_workflows.shared.event_rules import EventRule
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.serialization import revive

# The channels an event arrives through: Python code calling send_event, and the surfaces.
PYTHON, API, WEBHOOK, ADMIN, CLI = "python", "api", "webhook", "admin", "cli"
PEOPLE = {PYTHON: "send_event on a user's behalf", API: "the API", ADMIN: "the admin", CLI: "the command line"}


def rules_of(workflow_name: str) -> dict[str, EventRule] | None:
    """The workflow's declared events by type; None if it declares none (or is not registered here)."""
    try:
        return WorkflowOptions.of(registry.get(workflow_name)).events
    except WorkflowNotFound:
        return None


def check_arrival(rules: dict[str, EventRule] | None, workflow_name: str, event_type: str,
                  payload: Any) -> EventRule | None:
    """Refuse an undeclared type or a payload its schema rejects (``InvalidEvent``); every channel.
    ``rules`` are the workflow's (``WorkflowOptions.events``), read once by the caller for every check it
    makes."""
    if rules is None:
        return None
    rule = rules.get(event_type)
    if rule is None:
        accepted = ", ".join(sorted(rules)) or "none"
        raise InvalidEventType(
            f"Workflow {workflow_name!r} does not declare event type {event_type!r}; it accepts: {accepted}.",
            event_type=event_type,
        )
    if rule.schema is not None:
        error = (_first_model_error(rule.model, payload) if rule.model is not None
                 else _first_schema_error(rule, payload))
        if error is not None:
            path, message = error
            raise InvalidPayload(
                f"The payload of event {event_type!r} does not match its schema at {path}: {message}. "
                "Nothing was stored.",
                payload_path=path,
            )
    return rule


def _first_model_error(model: Any, payload: Any) -> tuple[str, str] | None:
    """The first error of a Pydantic model declared as the schema, as ``(path, message)``."""
    from pydantic import ValidationError

    try:
        # As run() will see it: a typed value sent from Python (the model's own instance) read back.
        model.model_validate(revive(payload))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        path = "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
        return path, str(first["msg"])[:500]
    return None


def _first_schema_error(rule: EventRule, payload) -> tuple[str, str] | None:
    error = next(iter(sorted(rule.validator.iter_errors(payload), key=lambda e: list(map(str, e.path)))), None)
    if error is None:
        return None
    path = "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.path)
    return path, error.message[:500]


def authorize(rules: dict[str, EventRule] | None, event_type: str, channel: str, user=None) -> None:
    """Refuse a sender the declaration (``rules``, the workflow's) does not allow (``EventRefused``): a
    webhook-only type sent by a person, a person's type sent as a webhook, a user without the type's
    permission."""
    if rules is None or event_type not in rules:
        return  # undeclared types are check_arrival's
    rule = rules[event_type]
    if channel == WEBHOOK:
        if not rule.webhook:
            raise NotAWebhook(
                f"Event type {event_type!r} is not declared as a webhook ('webhook': True), so a signed "
                "delivery cannot send it; a person sends it through the API or the admin.",
                event_type=event_type,
            )
        return
    if rule.webhook:
        raise WebhookOnly(
            f"Event type {event_type!r} is webhook-only: it is accepted only signed, at the webhook endpoint, "
            f"not through {PEOPLE.get(channel, channel)}.",
            event_type=event_type,
        )
    if rule.permission is None:
        return
    if user is None:
        raise EventPermissionRequired(
            f"Event type {event_type!r} needs the permission {rule.permission!r}: name the user who sends "
            "it (--user NAME on the command line).",
            event_type=event_type, permission=rule.permission,
        )
    if not user.has_perm(rule.permission):
        raise EventPermissionRequired(
            f"Sending event {event_type!r} needs the permission {rule.permission!r}, which "
            f"{user.get_username() or 'this user'!r} does not have.",
            event_type=event_type, permission=rule.permission,
        )
