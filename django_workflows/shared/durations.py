"""Durations as Cloudflare writes them: milliseconds, or "N unit(s)"."""

from __future__ import annotations

import re
from datetime import timedelta

from django_workflows.errors import InvalidStepInput

# A month and a year are fixed lengths, as in Cloudflare Workflows.
UNIT_SECONDS = {
    "millisecond": 0.001,
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
    "month": 30 * 86400,
    "year": 365 * 86400,
}

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$")


def parse_duration(value, *, what: str = "duration") -> timedelta:
    """Return ``value`` as a timedelta.

    Accepts a number of milliseconds (int or float), a ``timedelta``, or a
    string such as ``"10 seconds"``, ``"1 minute"``, ``"72 hours"``. Anything
    else, and anything negative, is an ``InvalidStepInput`` that says what
    was expected.
    """
    if isinstance(value, bool):
        raise InvalidStepInput(f"{what}: expected milliseconds or a string such as '10 seconds', got {value!r}")
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidStepInput(f"{what}: {value!r} is not a finite number of milliseconds")
        delta = timedelta(milliseconds=value)
    elif isinstance(value, str):
        match = _DURATION.match(value.lower())
        if not match or match.group(2) not in UNIT_SECONDS:
            units = ", ".join(UNIT_SECONDS)
            raise InvalidStepInput(
                f"{what}: cannot parse {value!r}; write milliseconds (e.g. 5000) or 'N unit' with a unit "
                f"among {units} (e.g. '10 seconds')"
            )
        delta = timedelta(seconds=float(match.group(1)) * UNIT_SECONDS[match.group(2)])
    else:
        raise InvalidStepInput(
            f"{what}: expected milliseconds or a string such as '10 seconds', got {type(value).__name__}"
        )
    if delta < timedelta(0):
        raise InvalidStepInput(f"{what}: {value!r} is negative; durations must be zero or more")
    return delta


def milliseconds(delta: timedelta) -> int | float:
    """``delta`` in milliseconds, as Cloudflare writes a duration: a whole number when it is one."""
    microseconds = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    whole, rest = divmod(microseconds, 1000)
    return whole if not rest else microseconds / 1000


def format_duration(delta: timedelta) -> str:
    """``delta`` as ``parse_duration`` reads it back, in the largest unit that writes it whole:
    ``"3 days"``, ``"90 minutes"``, ``"1 week"``; milliseconds otherwise (``"1500 milliseconds"``).
    Never in months or years, which are fixed lengths here (30 and 365 days) but not to a reader."""
    ms = milliseconds(delta)
    for unit in ("week", "day", "hour", "minute", "second"):
        unit_ms = UNIT_SECONDS[unit] * 1000
        if ms and ms % unit_ms == 0:
            count = int(ms // unit_ms)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{ms} millisecond{'s' if ms != 1 else ''}"
