"""What a journal row's values are written as: JSON text the engine encoded already, written as it is, and a
step's attempts, which every row of a ``step.do`` carries."""

from __future__ import annotations

import json
import re
from typing import Any


class Encoded(str):
    """JSON text already encoded (and size-checked) by the engine: written as is."""


# The type itself, not a function calling it: every step's row marks two values so.
encoded = Encoded


NO_ATTEMPTS = Encoded("[]")

# The keys of an attempt as the engine journals it (``Attempt.journaled``), in their order.
_ATTEMPT_KEYS = ("attempt", "start", "end", "success", "cpu_ms", "wall_ms")


def attempts_json(attempts: Any) -> str:
    """``json.dumps(attempts)``, written directly for the attempts the engine journals: every step's row
    encodes its attempts at every write, and the encoder's generality cost more than the row's other values
    together. Their keys are known and in order, their times ISO text that needs no escaping, their numbers
    ints and finite floats (whose JSON is their repr). Any other shape (an attempt with its error, one
    journaled by an earlier release) goes to ``json.dumps``."""
    if type(attempts) is not list:
        return json.dumps(attempts)
    parts = []
    for attempt in attempts:
        if type(attempt) is not dict or tuple(attempt) != _ATTEMPT_KEYS:
            return json.dumps(attempts)
        number, start, end, success, cpu_ms, wall_ms = attempt.values()
        if not (type(number) is int and type(start) is str and type(end) is str and type(success) is bool
                and type(cpu_ms) is float and type(wall_ms) is float and _PLAIN_TIME(start) and _PLAIN_TIME(end)):
            return json.dumps(attempts)
        parts.append(f'{{"attempt": {number}, "start": "{start}", "end": "{end}", '
                     f'"success": {"true" if success else "false"}, "cpu_ms": {cpu_ms!r}, "wall_ms": {wall_ms!r}}}')
    return f"[{', '.join(parts)}]"


# An ISO time as ``datetime.isoformat`` writes it: nothing in it to escape.
_PLAIN_TIME = re.compile(r"[0-9T:.+-]*").fullmatch
