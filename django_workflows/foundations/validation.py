"""The identifiers of the domain and their one rule: instance ids, event types, workflow names, step
names, idempotency keys. Each is part of a URL, a journal key or an audit trail, so each is checked
once, here, wherever it comes from (the API, the admin, the CLI, Python)."""

from __future__ import annotations

import re

from django_workflows.errors import (
    InvalidEventType,
    InvalidIdempotencyKey,
    InvalidInstanceId,
    InvalidStepInput,
)

# Letters, digits, '-' and '_', not starting with '-': safe in a URL path and a shell argument.
_IDENTIFIER = r"[a-zA-Z0-9_][a-zA-Z0-9_-]"

MAX_INSTANCE_ID = 100
INSTANCE_ID_PATTERN = re.compile(rf"^{_IDENTIFIER}*$")
# The ids the engine gives instances itself may hold '~' as well: a successor's (``families``: order-7~2),
# and a child's derived from such an id. A caller never creates one, and may look any of them up.
EXISTING_INSTANCE_ID_PATTERN = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9_~-]*$")
MAX_EVENT_TYPE = 100
EVENT_TYPE_PATTERN = re.compile(rf"^{_IDENTIFIER}*$")
# A workflow's name is part of the API's URLs and of every instance: the instance-id rule, shorter.
WORKFLOW_NAME_PATTERN = re.compile(rf"^{_IDENTIFIER}{{0,63}}$")
MAX_STEP_NAME = 256
# Event types the engine sends itself (a child workflow's end, to its parent): no one else may send
# them, wait for them or declare them.
RESERVED_EVENT_PREFIX = "__wf-"
MAX_IDEMPOTENCY_KEY = 255


def _identifier(value, pattern: re.Pattern, limit: int) -> bool:
    # fullmatch: match() would let a trailing newline through.
    return isinstance(value, str) and 0 < len(value) <= limit and pattern.fullmatch(value) is not None


def validate_instance_id(value) -> str:
    if not _identifier(value, INSTANCE_ID_PATTERN, MAX_INSTANCE_ID):
        raise InvalidInstanceId(
            f"Invalid instance id {value!r}: use 1 to {MAX_INSTANCE_ID} characters of letters, digits, '-' "
            "and '_', not starting with '-'.",
            instance_id=value,
        )
    return value


def validate_existing_instance_id(value) -> str:
    """An instance id to look up: the creation rule, or an id the engine gave (with '~')."""
    if not _identifier(value, EXISTING_INSTANCE_ID_PATTERN, MAX_INSTANCE_ID):
        validate_instance_id(value)  # raises, saying what an id is
    return value


def is_event_type(value) -> bool:
    return _identifier(value, EVENT_TYPE_PATTERN, MAX_EVENT_TYPE) and not value.startswith(RESERVED_EVENT_PREFIX)


def validate_event_type(value) -> str:
    if not is_event_type(value):
        raise InvalidEventType(
            f"Invalid event type {value!r}: use 1 to {MAX_EVENT_TYPE} characters of letters, digits, '-' "
            f"and '_', not starting with '-' (nor with {RESERVED_EVENT_PREFIX!r}, which is the engine's own).",
            event_type=value,
        )
    return value


def is_workflow_name(value) -> bool:
    return isinstance(value, str) and WORKFLOW_NAME_PATTERN.fullmatch(value) is not None


def validate_step_name(name) -> str:
    if type(name) is str and name in _VALID_STEP_NAMES:
        return name
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        raise InvalidStepInput(
            f"A step name must be a string of 1 to {MAX_STEP_NAME} characters, got {name!r}"
            + (" (write @step.do() or @step.do('name'), with the parentheses)" if callable(name) else "")
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidStepInput(
            f"A step name may not hold control characters (tab, newline...), got {name!r}: the name is "
            "the step's identity in the journal, the admin and the API"
        )
    if len(_VALID_STEP_NAMES) < _VALID_STEP_NAMES_KEPT:
        _VALID_STEP_NAMES.add(name)
    return name


# The step names found valid so far: a workflow calls the same few names again and again, each checked
# once. Bounded, for a workflow that makes its names up (an order's id in each).
_VALID_STEP_NAMES: set[str] = set()
_VALID_STEP_NAMES_KEPT = 10_000


def validate_idempotency_key(key) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise InvalidIdempotencyKey(
            f"An idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters, got {str(key)[:100]!r}.",
            idempotency_key=str(key)[:100],
        )
    return key
