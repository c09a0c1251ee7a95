"""Values that cross the journal: JSON a person can read, never pickle, with a size limit.

Plain JSON values (dicts with string keys, lists, strings, numbers, booleans, None) are written as they
are, through the C encoder, and read back by the C decoder: they never pay for types. Any other value
(a ``Decimal``, a ``datetime``, a model instance...) goes through the ``SERIALIZER`` setting's serializer,
which writes it in a tagged form (``django_workflows.typed_values``) and reads it back as the same type.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from django_workflows.foundations.conf import workflow_settings
from django_workflows.typed_values import CannotTag

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_SCALARS = (str, int, bool, type(None))
# A "\u0000" escape in JSON text, not preceded by an escaped backslash ("\\u0000" is a backslash and
# the text "u0000").
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class NotJournalable(ValueError):
    """The value cannot be stored: the message says why, for the caller to put in context."""

    def __init__(self, message: str, *, too_large: bool = False):
        super().__init__(message)
        self.too_large = too_large


def serializer() -> Any:
    """The ``SERIALIZER`` setting's serializer, made once until the settings change."""
    return workflow_settings.serializer()


def _plain(value: Any, reserved: str) -> bool:
    """Whether ``value`` is JSON as it is: only JSON's own types (exactly: no subclasses such as enums),
    dicts with string keys none of which is the serializer's reserved key. The types of a container's
    items are gathered by ``set(map(type, ...))``, in C: the price of this look stays a small part of
    encoding the value."""
    kind = type(value)
    if kind is dict:
        if reserved in value or not set(map(type, value)) <= _STR:
            return False
        items: Any = value.values()
    elif kind is list:
        items = value
    else:
        return kind in _LEAVES
    kinds = set(map(type, items))
    if kinds <= _LEAVES:
        return True
    if not kinds <= _JSON_TYPES:
        return False
    return all(_plain(item, reserved) for item in items if type(item) is dict or type(item) is list)


_STR = frozenset({str})
_LEAVES = frozenset({str, int, float, bool, type(None)})
_JSON_TYPES = _LEAVES | {dict, list}


def is_plain(value: Any) -> bool:
    """Whether ``value`` is written to the journal as it is, without tags."""
    try:
        return _plain(value, serializer().reserved_key)
    except RecursionError:
        return False


def dump(value: Any, limit: int) -> tuple[str, Any]:
    """``(json_text, tree)``: the journal's form of ``value`` as text and as plain JSON types, the
    tree to store in a JSON column (params, event payloads). Refused as by ``encode``."""
    text, _ = encode(value, limit, revive=False)
    return text, json.loads(text)


def encode(value: Any, limit: int, *, revive: bool = True) -> tuple[str, Any]:
    """Return ``(json_text, value_as_replays_will_see_it)``.

    The second item is what a later replay will get back from the journal
    (a typed value read back through the serializer, a model instance read
    again from its table), so the first run and every replay see exactly the
    same value. ``revive=False`` leaves it out (None).
    """
    typed = False
    try:
        codec = serializer()
        try:
            plain = _plain(value, codec.reserved_key)
        except RecursionError:
            plain = True  # the C encoder tells a circular reference from nesting too deep
        if not plain:
            typed = True
            value = codec.dump(value)
        text = _encoder.encode(value)
    except CannotTag as exc:
        raise NotJournalable(f"is not JSON-serializable (it holds {exc}); return JSON types (dicts, lists, "
                             "str, int, float, bool, None) or the types docs/guide/typed-values.md "
                             "lists") from None
    except (TypeError, ValueError) as exc:
        raise NotJournalable(f"is not JSON-serializable ({exc}); return dicts, lists, str, int, float, "
                             "bool or None, or the types listed in docs/guide/typed-values.md") from None
    except RecursionError:
        raise NotJournalable("is nested too deeply to be written as JSON") from None
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            # Python strings may hold half of a UTF-16 pair ("\ud800", from JSON such as "\\ud800");
            # it is no character, UTF-8 cannot encode it and PostgreSQL refuses it.
            raise NotJournalable("contains a lone surrogate (such as '\\ud800'), which is not text") from None
    if "\\u0000" in text and _NUL.search(text):
        # Valid JSON, but PostgreSQL's jsonb cannot hold U+0000; refused on every database alike.
        raise NotJournalable("contains the character U+0000 (NUL), which cannot be stored; "
                             "encode binary data, as base64 for instance")
    if size > limit:
        raise NotJournalable(f"is {size} bytes as JSON, over the limit of {limit} bytes", too_large=True)
    if not revive:
        return text, None
    if typed:
        return text, serializer().load(json.loads(text))
    if type(value) in _SCALARS:
        return text, value
    return text, json.loads(text)


def is_typed(text: str) -> bool:
    """Whether journaled JSON text may hold tagged values: plain JSON is read without the serializer."""
    return serializer().marker in text


def read(text: str) -> Any:
    """The value journaled as ``text``."""
    tree = json.loads(text)
    return _load(tree) if is_typed(text) else tree


def revive(tree: Any) -> Any:
    """The value stored as ``tree`` (a JSON column already parsed: params, an event's payload, an
    output), read back through the serializer."""
    if tree is None or type(tree) in _SCALARS:
        return tree
    return _load(tree)


def _load(tree: Any) -> Any:
    try:
        return serializer().load(tree)
    except RecursionError:
        # Deeper than a typed value can be written (dumping it would have been refused as nested too
        # deeply): JSON stored as it came, the parser's depth allowing it.
        return tree


def round_trip_problem(codec: Any, value: Any) -> str | None:
    """What goes wrong when ``codec`` writes ``value`` as JSON and reads it back, or None if it comes
    back equal and of the same type: what the system check asks of a ``SERIALIZER``."""
    try:
        text = _encoder.encode(codec.dump(value))
        back = codec.load(json.loads(text)) if codec.marker in text else json.loads(text)
    except Exception as exc:  # a serializer of the project's: whatever it raises is the problem
        return f"raises {type(exc).__name__}: {exc}"
    if type(back) is not type(value) or back != value:
        return f"comes back as {back!r} ({type(back).__name__})"
    return None


def storable_text(text: str) -> str:
    """``text`` as every database can store it (error messages, tracebacks): NUL written as ``\\x00``
    and a lone surrogate as ``\\ud800``, which PostgreSQL and UTF-8 refuse."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


_canonical = json.JSONEncoder(ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":"))


def canonical_digest(value: Any) -> str:
    """A digest of ``value`` as canonical JSON (keys sorted, no spaces): equal for equal JSON documents
    whatever their key order, different whenever a JSON type differs (``true`` is not ``1``, ``1.0`` is
    not ``1``), which Python's ``==`` would not tell apart."""
    return hashlib.sha256(_canonical.encode(value).encode("ascii")).hexdigest()
