"""Values that cross the journal: strict JSON, never pickle, with a size limit."""

from __future__ import annotations

import json
from typing import Any

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_SCALARS = (str, int, bool, type(None))


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
    size = len(text.encode("utf-8")) if len(text) * 4 > limit else len(text)
    if size > limit:
        raise NotJournalable(f"is {size} bytes as JSON, over the limit of {limit} bytes", too_large=True)
    if type(value) in _SCALARS:
        return text, value
    return text, json.loads(text)
