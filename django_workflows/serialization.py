"""Values that cross the journal: strict JSON, never pickle, with a size limit."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

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


def encode(value: Any, limit: int) -> tuple[str, Any]:
    """Return ``(json_text, value_as_replays_will_see_it)``.

    The second item is what a later replay will get back from the journal
    (tuples become lists, dict keys become strings), so the first run and
    every replay see exactly the same value.
    """
    try:
        text = _encoder.encode(value)
    except (TypeError, ValueError) as exc:
        raise NotJournalable(f"is not JSON-serializable ({exc}); return dicts, lists, str, int, float, "
                             "bool or None") from None
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
    if type(value) in _SCALARS:
        return text, value
    return text, json.loads(text)


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
