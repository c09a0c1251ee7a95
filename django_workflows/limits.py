"""A workflow's concurrency and rate limits, as its class declares them.

``concurrency = 10`` bounds the instances of the workflow that hold a live lease at once (a replay
running, or one that is finishing its current step before a pause), across every worker. ``rate_limit =
"100/minute"`` bounds its starts (first replays) in any sliding window of that length. The claim that
takes an instance's lease enforces both (``store.leases``); this module only parses the declarations, which
``options`` reads once per class.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from django_workflows.errors import WorkflowConfigError

RATE_PERIODS = {"second": 1, "minute": 60, "hour": 3600}
_PERIOD_ALIASES = {"s": "second", "sec": "second", "second": "second", "seconds": "second",
                   "m": "minute", "min": "minute", "minute": "minute", "minutes": "minute",
                   "h": "hour", "hour": "hour", "hours": "hour"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")
MAX_CONCURRENCY = 100_000
MAX_RATE = 1_000_000


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any span of ``period``."""

    count: int
    period: timedelta
    unit: str

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"


@dataclass(frozen=True)
class WorkflowLimits:
    """A class's limits: a value that check E026/E027 refuses is left out (None), as if not declared."""

    concurrency: int | None
    rate: RateLimit | None


def parse_concurrency(value, where: str = "concurrency") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY:
        raise WorkflowConfigError(
            f"{where} must be a whole number from 1 to {MAX_CONCURRENCY} (or None for no limit), got {value!r}"
        )
    return value


@lru_cache(maxsize=256)
def _parse_rate(value: str) -> RateLimit | None:
    match = _RATE.match(value.lower())
    if not match or match.group(2) not in _PERIOD_ALIASES:
        return None
    count, unit = int(match.group(1)), _PERIOD_ALIASES[match.group(2)]
    if not 1 <= count <= MAX_RATE:
        return None
    return RateLimit(count, timedelta(seconds=RATE_PERIODS[unit]), unit)


def parse_rate_limit(value, where: str = "rate_limit") -> RateLimit | None:
    if value is None:
        return None
    rate = _parse_rate(value) if isinstance(value, str) else None
    if rate is None:
        raise WorkflowConfigError(
            f"{where} must be 'N/second', 'N/minute' or 'N/hour' with N from 1 to {MAX_RATE} (or None for no "
            f"limit), got {value!r}"
        )
    return rate
