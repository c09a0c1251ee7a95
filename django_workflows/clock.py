"""The engine's sense of time.

Every wake time, deadline and timestamp the engine writes comes from
``now()``, so ``django_workflows.testing`` can replace the clock with one
that moves only when a test says so.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that stands still until ``advance()`` moves it."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> None:
        self._now += delta

    def set(self, moment: datetime) -> None:
        if moment < self._now:
            raise ValueError(f"the clock cannot go back from {self._now} to {moment}")
        self._now = moment


_clock: SystemClock | ManualClock = SystemClock()


def now() -> datetime:
    return _clock.now()


def use(clock) -> SystemClock | ManualClock:
    """Install ``clock`` and return the one it replaces."""
    global _clock
    previous, _clock = _clock, clock
    return previous
