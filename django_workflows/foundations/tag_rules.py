"""Tags: short strings an instance is found by (Temporal's search attributes), ``{"tenant": "acme"}``.

Set at ``create(tags=...)`` and from ``run()`` by ``step.set_tags(...)``; kept one row per key in their
own table (``InstanceTag``), indexed on (key, value), so that a filter on a tag reads the index instead
of every instance's JSON. One rule for what a tag may be, checked here wherever tags come from (Python,
the API, the CLI, a filter), so that every surface refuses the same tag with the same words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from django_workflows.errors import InvalidTags

MAX_KEY = 64
MAX_VALUE = 255
MAX_TAGS = 32
# A key is part of a query parameter (``?tag.<key>=``) and a CLI argument (``--tag key=value``): letters,
# digits, '_' and '-', starting with a letter or '_', so that it needs no quoting anywhere.
KEY_PATTERN = re.compile(rf"[A-Za-z_][A-Za-z0-9_-]{{0,{MAX_KEY - 1}}}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
RULE = (f"a tag's key is 1 to {MAX_KEY} letters, digits, '_' and '-', starting with a letter or '_'; its value "
        f"a string of 1 to {MAX_VALUE} characters without control characters")


def validate_key(key, what: str = "tags") -> str:
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise InvalidTags(f"{what}: {key!r} is not a tag key ({RULE}).", tag=key)
    return key


def validate_value(key: str, value, what: str = "tags") -> str:
    if not isinstance(value, str):
        raise InvalidTags(f"{what}: the tag {key!r} has the value {value!r} ({type(value).__name__}); tags are "
                          f"strings, so that every surface compares them alike: pass str({value!r}).", tag=key)
    if not 0 < len(value) <= MAX_VALUE or _CONTROL.search(value):
        raise InvalidTags(f"{what}: the tag {key!r} has the value {value!r} ({RULE}).", tag=key)
    return value


def validate_tags(tags, what: str = "tags", removable: bool = False) -> dict[str, str | None]:
    """``tags`` checked: a mapping of at most ``MAX_TAGS`` keys to string values, or to None where
    ``removable`` (``step.set_tags(region=None)`` removes the tag). Anything else is ``InvalidTags``."""
    if tags is None:
        return {}
    if not isinstance(tags, Mapping):
        raise InvalidTags(f"{what} must be a dict of tag keys to string values, like {{'tenant': 'acme'}}, "
                          f"got {type(tags).__name__}.")
    if len(tags) > MAX_TAGS:
        raise InvalidTags(f"{what}: an instance holds at most {MAX_TAGS} tags, got {len(tags)}; keep tags for "
                          "what instances are searched by, and the rest in params.")
    checked: dict[str, str | None] = {}
    for key, value in tags.items():
        validate_key(key, what)
        if value is None and removable:
            checked[key] = None
        else:
            checked[key] = validate_value(key, value, what)
    return checked


def parse_tag_filter(text: str, what: str = "--tag") -> tuple[str, str]:
    """``"tenant=acme"`` (the CLI's ``--tag``) as ``("tenant", "acme")``; anything else is ``InvalidTags``."""
    key, equals, value = text.partition("=")
    if not equals:
        raise InvalidTags(f"{what} {text!r}: write KEY=VALUE, like tenant=acme.")
    return validate_key(key, what), validate_value(key, value, what)
