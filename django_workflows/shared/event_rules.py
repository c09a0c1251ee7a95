"""The ``events`` a workflow class declares, read: each type's rules, and what is wrong with the
declaration (system check E013). ``declared_events`` says what the rules mean and applies them to each
event sent; ``options`` reads a class's declaration once, through here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django_workflows.foundations.validation import MAX_EVENT_TYPE, is_event_type

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
    model: Any = None
    """A Pydantic model declared as the schema: it validates payloads, and run() gets its instance from
    ``wait_for_event``; ``schema`` is then its JSON Schema, which the OpenAPI document shows."""


def is_pydantic_model(schema: Any) -> bool:
    """Whether ``schema`` is a Pydantic model class (Pydantic is an extra: only one the project has)."""
    return (isinstance(schema, type) and hasattr(schema, "model_validate")
            and hasattr(schema, "model_json_schema"))


def problems(declared, approvals: Iterable[str]) -> list[str]:
    """What is wrong with a class's ``events`` (``declared``), given the types its ``approvals`` names;
    empty when it is right or absent."""
    if declared is None:
        return []
    if not isinstance(declared, dict):
        return [f"events must be a dict of event type to its rules, got {type(declared).__name__}"]
    found = []
    for event_type, rules in declared.items():
        if not is_event_type(event_type):
            found.append(f"{event_type!r} is not an event type (1 to {MAX_EVENT_TYPE} letters, digits, "
                         "'-' and '_', not starting with '-')")
            continue
        if not isinstance(rules, dict):
            found.append(f"the rules of {event_type!r} must be a dict ({{}} for none), got {rules!r}")
            continue
        unknown = sorted(set(map(str, rules)) - KEYS)
        if unknown:
            found.append(f"{event_type!r} has unknown rules {unknown}; the rules are {sorted(KEYS)}")
        permission = rules.get("permission")
        if permission is not None and (not isinstance(permission, str) or permission.count(".") != 1):
            found.append(f"the permission of {event_type!r} must be 'app_label.codename', got {permission!r}")
        for flag in ("approval", "webhook"):
            if not isinstance(rules.get(flag, False), bool):
                found.append(f"the {flag} rule of {event_type!r} must be True or False")
        if rules.get("approval") and rules.get("webhook"):
            found.append(f"{event_type!r} cannot be both an approval (sent by a person in the admin) and "
                         "webhook-only (sent only signed, by a provider)")
        if rules.get("webhook") and permission is not None:
            found.append(f"{event_type!r} is webhook-only: a signed delivery has no user to hold "
                         f"{permission!r}; drop one of the two rules")
        if "schema" in rules:
            found.extend(_schema_problems(event_type, rules["schema"]))
    for event_type in approvals:
        if event_type not in declared:
            found.append(f"approvals names {event_type!r}, which events does not declare; declare it "
                         "with 'approval': True")
    return found


def _schema_problems(event_type: str, schema) -> list[str]:
    from jsonschema import SchemaError, validators

    if is_pydantic_model(schema):
        return []
    if not isinstance(schema, (dict, bool)):
        return [f"the schema of {event_type!r} must be a JSON Schema (a dict) or a Pydantic model, "
                f"got {schema!r}"]
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return [f"the schema of {event_type!r} is not a valid JSON Schema: {exc.message}"]
    return []


def rules(declared) -> dict[str, EventRule] | None:
    """A class's declared events by type; None if it declares none. What ``problems`` reports is
    skipped here rather than raised at a sender (a type whose rules are not a dict, a schema that is
    not one), and the system check says so."""
    if not isinstance(declared, dict):
        return None
    found = {}
    for event_type, given in declared.items():
        if isinstance(event_type, str) and isinstance(given, dict):
            schema = given.get("schema")
            if schema is not None and _schema_problems(event_type, schema):
                schema = None
            model = schema if is_pydantic_model(schema) else None
            if model is not None:
                schema = model.model_json_schema()
            found[event_type] = EventRule(event_type, permission=given.get("permission"), schema=schema,
                                          approval=given.get("approval") is True,
                                          webhook=given.get("webhook") is True,
                                          validator=_validator(schema) if schema is not None and model is None
                                          else None, model=model)
    return found


def _validator(schema):
    from jsonschema import validators

    return validators.validator_for(schema)(schema)
