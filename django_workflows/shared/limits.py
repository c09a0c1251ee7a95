"""A workflow's concurrency and rate limits, as its class declares them.

``concurrency = 10`` bounds the instances of the workflow that hold a live lease at once (a replay
running, or one that is finishing its current step before a pause), across every worker. ``rate_limit =
"100/minute"`` bounds its starts (first replays) in any sliding window of that length. Either may be
keyed, ``concurrency = {"limit": 2, "key": "params.customer_id"}``: the limit then holds per value of
the key (per customer), each instance's value computed once at create and stored on it
(``Instance.limit_key``). The claim that takes an instance's lease enforces both (``store.leases``);
this module only parses the declarations, which ``options`` reads once per class, and computes a key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache

from django.db import DatabaseError

from django_workflows.errors import InvalidParams, WorkflowConfigError

RATE_PERIODS = {"second": 1, "minute": 60, "hour": 3600}
_PERIOD_ALIASES = {"s": "second", "sec": "second", "second": "second", "seconds": "second",
                   "m": "minute", "min": "minute", "minute": "minute", "minutes": "minute",
                   "h": "hour", "hour": "hour", "hours": "hour"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+)\s*$")
MAX_CONCURRENCY = 100_000
MAX_RATE = 1_000_000
MAX_KEY_LENGTH = 255
"""The longest value of a limit key an instance stores (``Instance.limit_key``)."""
_KEY_PATH = re.compile(r"^(params|tags)(\.[^.\s]+)+$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any span of ``period``."""

    count: int
    period: timedelta
    unit: str

    def __str__(self) -> str:
        return f"{self.count}/{self.unit}"


@dataclass(frozen=True)
class LimitKey:
    """What a keyed limit counts by: a dotted path into the params (``"params.customer.id"``) or the
    tags (``"tags.tenant"``), or a callable of ``(params, tags)``."""

    declared: str | Callable[[object, Mapping[str, str]], object]

    def __str__(self) -> str:
        return self.declared if isinstance(self.declared, str) else getattr(self.declared, "__qualname__", "key")

    def of(self, params: object, tags: Mapping[str, str], workflow: str) -> str:
        """The key's value for an instance created with ``params`` and ``tags``, as text; a value it cannot
        find or take is ``InvalidParams``, which creates nothing."""
        if isinstance(self.declared, str):
            source, *path = self.declared.split(".")
            value: object = params if source == "params" else dict(tags)
            for part in path:
                if isinstance(value, Mapping) and part in value:
                    value = value[part]
                elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                    value = value[int(part)]
                else:
                    raise InvalidParams(
                        f"Workflow {workflow!r} limits its instances per {self.declared!r}, and the {source} of "
                        f"this instance have no {part!r} there; give it, so the instance is counted with the "
                        f"others of its key.", key=self.declared)
        else:
            try:
                value = self.declared(params, dict(tags))
            except DatabaseError:
                # A key that queries the database and finds it gone is not the caller's error: the create()
                # fails as any statement does (the API's 503), to be tried again.
                raise
            except Exception as error:
                # The key is the class's own code run on the caller's params before anything is written:
                # failing on them says the params lack what the key reads, which the caller fixes.
                raise InvalidParams(
                    f"Workflow {workflow!r} limits its instances per {self}, which raised "
                    f"{type(error).__name__}: {error} on this instance's params and tags; give the params "
                    f"it reads, so the instance is counted with the others of its key.",
                    key=str(self)) from error
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not 0 < len(str(value)) <= MAX_KEY_LENGTH:
            raise InvalidParams(
                f"Workflow {workflow!r} limits its instances per {self}, which came to {value!r} for this "
                f"instance: a key must be a string of 1 to {MAX_KEY_LENGTH} characters or a whole number.",
                key=str(self))
        return str(value)


@dataclass(frozen=True)
class WorkflowLimits:
    """A class's limits: a value that check E026/E027 refuses is left out (None), as if not declared.
    ``key`` is what a keyed limit counts by; ``concurrency_keyed`` and ``rate_keyed`` say which of the
    two it applies to (a limit without a key counts every instance of the workflow)."""

    concurrency: int | None
    rate: RateLimit | None
    key: LimitKey | None = None
    concurrency_keyed: bool = False
    rate_keyed: bool = False

    def lock_name(self, workflow_name: str, key: str) -> str:
        """What a claim serializes on: the workflow's key when every limit it has is keyed (claims of two
        customers do not wait for each other), else the whole workflow."""
        keyed = (self.concurrency is None or self.concurrency_keyed) and (self.rate is None or self.rate_keyed)
        return f"{workflow_name}:{key}" if keyed else workflow_name


def split_keyed(value, where: str) -> tuple[object, LimitKey | None]:
    """``{"limit": ..., "key": ...}`` as its limit and its key; any other value as itself without a key.
    A dict with other keys, or a key that is neither a dotted path into params or tags nor a callable,
    is a ``WorkflowConfigError`` naming ``where``."""
    if not isinstance(value, dict):
        return value, None
    if set(value) != {"limit", "key"}:
        raise WorkflowConfigError(f"{where} as a dict takes exactly the keys 'limit' and 'key', got "
                                  f"{sorted(map(str, value))}")
    key = value["key"]
    if not callable(key) and not (isinstance(key, str) and _KEY_PATH.match(key)):
        raise WorkflowConfigError(f"{where}['key'] must be a dotted path into the params or the tags "
                                  f"('params.customer_id', 'tags.tenant') or a callable of (params, tags), got {key!r}")
    return value["limit"], LimitKey(key)


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
