"""When a new instance starts: at once (the default), at a time (``create(start_at=...)``,
``start_in=...``), or once a burst of triggers has gone quiet (``create(debounce=...)``).

An instance that starts later is created ``scheduled`` with its start as its wake time; the worker's
wake-up loop queues it when that time comes, as it wakes a sleeping instance. Nothing here writes:
``read_start`` checks what the caller asked for and says what is wrong with it before anything is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_workflows.shared.durations import parse_duration
from django_workflows.errors import InvalidParams, InvalidStepInput

MAX_DEBOUNCE_KEY = 255
DEBOUNCE_KEYS = ("key", "period", "max_wait", "merge")

MAX_START_DELAY = timedelta(days=3650)
"""The furthest ahead an instance may be scheduled: past it, a date is more likely a mistake (a year
typed wrong, milliseconds taken for seconds) than a plan."""


@dataclass(frozen=True)
class Debounce:
    """``create(debounce={"key": ..., "period": ..., "max_wait": ..., "merge": ...})``, read."""

    key: str
    period: timedelta
    """How long after the last trigger the instance starts."""
    max_wait: timedelta | None = None
    """How long after the first trigger it starts at the latest, however often triggers come."""
    merge: Callable[[Any, Any], Any] | None = None
    """``merge(params so far, this trigger's params)``: the params the instance starts with. None: the
    last trigger's params win."""


@dataclass(frozen=True)
class Start:
    """What ``create()`` was asked about the start: a delay (``start_in``) or a time (``start_at``), or a
    debounce; nothing means at once."""

    delay: timedelta | None = None
    at: datetime | None = None
    debounce: Debounce | None = None

    def wake_at(self, now: datetime) -> datetime | None:
        """When the instance starts, if later than ``now``; None: at once (a start time that has passed
        starts it at once too)."""
        if self.debounce is not None:
            return now + self.debounce.period
        moment = self.at if self.at is not None else (now + self.delay if self.delay else None)
        return moment if moment is not None and moment > now else None


def read_duration(value: Any, what: str, *, at_least: timedelta = timedelta(0)) -> timedelta:
    """A delay or a debounce's period, checked; what it cannot take is ``InvalidParams``."""
    try:
        delta = parse_duration(value, what=what)
    except InvalidStepInput as exc:
        raise InvalidParams(str(exc)) from None
    except OverflowError:
        delta = MAX_START_DELAY + timedelta(days=1)
    if delta > MAX_START_DELAY:
        raise InvalidParams(f"{what}: {value!r} is more than {MAX_START_DELAY.days} days; schedule nearer starts.")
    if delta < at_least:
        raise InvalidParams(f"{what}: {value!r} is too short; it must be at least {at_least}.")
    return delta


def _start_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidParams(f"start_at must be a datetime, got {type(value).__name__}; for a delay use "
                            "start_in ('10 minutes').")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidParams(f"start_at {value.isoformat()} has no time zone, so it names no moment; pass an aware "
                            "datetime (django.utils.timezone.make_aware, or one with tzinfo=UTC).")
    return value


def read_debounce(value: Any) -> Debounce:
    if not isinstance(value, dict) or set(value).difference(DEBOUNCE_KEYS) or "key" not in value or "period" not in value:
        raise InvalidParams("debounce must be a dict {'key': str, 'period': duration} with, optionally, 'max_wait' "
                            f"(a duration) and 'merge' (a function of the params so far and the new ones); got {value!r}")
    key = value["key"]
    if not isinstance(key, str) or not key or len(key) > MAX_DEBOUNCE_KEY or not key.isprintable():
        raise InvalidParams(f"debounce['key'] must be a string of 1 to {MAX_DEBOUNCE_KEY} printable characters "
                            f"(such as f'user-{{user.pk}}'), got {key!r}")
    period = read_duration(value["period"], "debounce['period']", at_least=timedelta(milliseconds=1))
    max_wait = value.get("max_wait")
    if max_wait is not None:
        max_wait = read_duration(max_wait, "debounce['max_wait']", at_least=period)
    merge = value.get("merge")
    if merge is not None and not callable(merge):
        raise InvalidParams(f"debounce['merge'] must be a function (params so far, new params) -> params, got "
                            f"{type(merge).__name__}")
    return Debounce(key, period, max_wait, merge)


def read_start(start_at: Any = None, start_in: Any = None, debounce: Any = None, *,
               instance_id: str | None = None) -> Start:
    """The start ``create()`` was asked for, checked; what it cannot take is ``InvalidParams``."""
    asked = [name for name, value in (("start_at", start_at), ("start_in", start_in), ("debounce", debounce))
             if value is not None]
    if len(asked) > 1:
        raise InvalidParams(f"create() takes one of start_at, start_in and debounce, got {' and '.join(asked)}: "
                            "a debounced instance starts when its triggers go quiet.")
    if debounce is not None:
        if instance_id is not None:
            raise InvalidParams("create(debounce=...) chooses the instance (a trigger joins the one its key "
                                "has scheduled), so it takes no id; leave the id out.")
        return Start(debounce=read_debounce(debounce))
    if start_in is not None:
        return Start(delay=read_duration(start_in, "start_in"))
    if start_at is not None:
        return Start(at=_start_at(start_at))
    return Start()
