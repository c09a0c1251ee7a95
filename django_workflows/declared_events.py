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
  with the path that failed, and nothing is stored;
- ``approval``: the types the admin's Approve and Reject buttons send.

Python code calling ``send_event`` is trusted like the rest of the project's code: the type must be
declared and the payload must match, but no permission or channel applies, unless it names the user it
sends for (``send_event(..., user=...)``). ``django_workflows.sending`` applies these rules, for every
channel.
A workflow without ``events`` keeps the open behaviour: any valid type, from anyone with ``send_event``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django_workflows.errors import (
    EventPermissionRequired,
    InvalidEventType,
    InvalidPayload,
    NotAWebhook,
    WebhookOnly,
    WorkflowNotFound,
)
from django_workflows.validation import MAX_EVENT_TYPE, is_event_type

# The channels an event arrives through: Python code calling send_event, and the surfaces.
PYTHON, API, WEBHOOK, ADMIN, CLI = "python", "api", "webhook", "admin", "cli"
PEOPLE = {PYTHON: "send_event on a user's behalf", API: "the API", ADMIN: "the admin", CLI: "the command line"}

KEYS = frozenset({"permission", "schema", "approval", "webhook"})


@dataclass(frozen=True)
class EventRule:
    type: str
    permission: str | None = None
    schema: dict | None = None
    approval: bool = False
    webhook: bool = False
    # The schema's validator, compiled once with the rules.
    validator: Any = field(default=None, compare=False, repr=False)


def declaration_problems(cls) -> list[str]:
    """What is wrong with ``cls.events``, for the system check; empty when it is right or absent."""
    declared = getattr(cls, "events", None)
    if declared is None:
        return []
    if not isinstance(declared, dict):
        return [f"events must be a dict of event type to its rules, got {type(declared).__name__}"]
    problems = []
    for event_type, rules in declared.items():
        if not is_event_type(event_type):
            problems.append(f"{event_type!r} is not an event type (1 to {MAX_EVENT_TYPE} letters, digits, "
                            "'-' and '_', not starting with '-')")
            continue
        if not isinstance(rules, dict):
            problems.append(f"the rules of {event_type!r} must be a dict ({{}} for none), got {rules!r}")
            continue
        unknown = sorted(set(map(str, rules)) - KEYS)
        if unknown:
            problems.append(f"{event_type!r} has unknown rules {unknown}; the rules are {sorted(KEYS)}")
        permission = rules.get("permission")
        if permission is not None and (not isinstance(permission, str) or permission.count(".") != 1):
            problems.append(f"the permission of {event_type!r} must be 'app_label.codename', got {permission!r}")
        for flag in ("approval", "webhook"):
            if not isinstance(rules.get(flag, False), bool):
                problems.append(f"the {flag} rule of {event_type!r} must be True or False")
        if rules.get("approval") and rules.get("webhook"):
            problems.append(f"{event_type!r} cannot be both an approval (sent by a person in the admin) and "
                            "webhook-only (sent only signed, by a provider)")
        if rules.get("webhook") and permission is not None:
            problems.append(f"{event_type!r} is webhook-only: a signed delivery has no user to hold "
                            f"{permission!r}; drop one of the two rules")
        if "schema" in rules:
            problems.extend(_schema_problems(event_type, rules["schema"]))
    approvals = cls.approvals
    for event_type in [approvals] if isinstance(approvals, str) else approvals:
        if event_type not in declared:
            problems.append(f"approvals names {event_type!r}, which events does not declare; declare it "
                            "with 'approval': True")
    return problems


def _schema_problems(event_type: str, schema) -> list[str]:
    from jsonschema import SchemaError, validators

    if not isinstance(schema, (dict, bool)):
        return [f"the schema of {event_type!r} must be a JSON Schema (a dict), got {schema!r}"]
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return [f"the schema of {event_type!r} is not a valid JSON Schema: {exc.message}"]
    return []


@cache
def rules_for(cls) -> dict[str, EventRule] | None:
    """A workflow class's declared events by type; None if it declares none.

    Keyed by the class: a re-imported module defines a new one. Read only after the check passed, so
    anything it would have reported is skipped here rather than raised at a sender."""
    declared = getattr(cls, "events", None)
    if not isinstance(declared, dict):
        return None
    rules = {}
    for event_type, given in declared.items():
        if isinstance(event_type, str) and isinstance(given, dict):
            schema = given.get("schema")
            rules[event_type] = EventRule(event_type, permission=given.get("permission"), schema=schema,
                                          approval=given.get("approval") is True,
                                          webhook=given.get("webhook") is True,
                                          validator=_validator(schema) if schema is not None else None)
    return rules


def rules_of(workflow_name: str) -> dict[str, EventRule] | None:
    """The workflow's declared events by type; None if it declares none (or is not registered here)."""
    from django_workflows.definition import registry

    try:
        return rules_for(registry.get(workflow_name))
    except WorkflowNotFound:
        return None


def approval_types(workflow_name: str) -> frozenset[str]:
    """The types the admin's Approve and Reject buttons may send: those declared ``approval``, and
    those named by the class's ``approvals``."""
    from django_workflows.definition import registry

    try:
        cls = registry.get(workflow_name)
    except WorkflowNotFound:
        return frozenset()
    named = cls.approvals
    types = set([named] if isinstance(named, str) else named)
    types.update(rule.type for rule in (rules_for(cls) or {}).values() if rule.approval)
    return frozenset(types)


def check_arrival(rules: dict[str, EventRule] | None, workflow_name: str, event_type: str,
                  payload: Any) -> EventRule | None:
    """Refuse an undeclared type or a payload its schema rejects (``InvalidEvent``); every channel.
    ``rules`` are the workflow's (``rules_for``), read once by the caller for every check it makes."""
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
        error = _first_schema_error(rule, payload)
        if error is not None:
            path, message = error
            raise InvalidPayload(
                f"The payload of event {event_type!r} does not match its schema at {path}: {message}. "
                "Nothing was stored.",
                payload_path=path,
            )
    return rule


def _first_schema_error(rule: EventRule, payload) -> tuple[str, str] | None:
    error = next(iter(sorted(rule.validator.iter_errors(payload), key=lambda e: list(map(str, e.path)))), None)
    if error is None:
        return None
    path = "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.path)
    return path, error.message[:500]


def _validator(schema):
    from jsonschema import validators

    return validators.validator_for(schema)(schema)


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
