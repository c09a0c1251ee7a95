"""The timeline's time axis: where a moment goes, the ticks, and durations as people read them.

The time axis is linear: a second is as wide at the start as at the end, so a 60 ms hand-off between
two 3 s steps is drawn fifty times narrower than they are, and ticks fall on round offsets since the
instance was queued. A step of a few milliseconds beside a wait of hours is a sliver (never thinner than
the timeline's ``MIN_BAR``); its exact times are in its tooltip and the journal. Only what lies ahead of
the last thing that happened (the rest of a wait or sleep, a deadline, the next attempt) may be drawn
shorter: when drawing it to scale would take more than ``AHEAD_SHARE`` of the axis, it is squeezed into
that share behind a break mark labelled with its real length, so that the past keeps the room.
"""

from __future__ import annotations

import math
from datetime import datetime

TICK_SPACING = 92
AHEAD_SHARE = 0.25
TEXT_CHAR = 6  # pixels per character of the 10-11 px texts of the axis and the events, measured roughly
# Tick intervals, in seconds: the first that leaves room for its labels is used.
TICK_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30,
    60, 2 * 60, 5 * 60, 10 * 60, 15 * 60, 30 * 60,
    3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
    86400, 2 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400,
)
UNITS = (("d", 86400), ("h", 3600), ("min", 60))


def human_duration(seconds: float) -> str:
    """``0.0123`` -> "12 ms", ``95`` -> "1 min 35 s", ``266400`` -> "3 d 2 h"."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    parts = []
    remaining = int(round(seconds))
    for name, size in units:
        if remaining >= size:
            parts.append(f"{remaining // size} {name}")
            remaining %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def human_milliseconds(ms: float) -> str:
    """A CPU or wall time in milliseconds, down to the fractions a quick step takes: ``0.042`` -> "0.04
    ms", ``3.21`` -> "3.2 ms", ``12.3`` -> "12 ms", ``31200`` -> "31.2 s"."""
    ms = max(0.0, ms)
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    return human_duration(ms / 1000)


def tick_label(offset: float, step: float) -> str:
    """An offset in seconds as a tick shows it, down to the unit of the ``step`` between ticks, so that
    no two ticks read the same: "+0", "+250 ms", "+1.5 s", "+2 min 30 s", "+3 d 2 h"."""
    if offset <= 0:
        return "+0"
    if offset < 1:
        return f"+{offset * 1000:.0f} ms"
    decimals = math.ceil(round(-math.log10(step), 6)) if step < 1 else 0
    smallest = next(size for size in (86400, 3600, 60, 1) if size <= max(step, 1))
    rest = round(offset, decimals)
    parts = []
    for name, size in UNITS:
        if size < smallest:
            break
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{int(count)} {name}")
    if smallest == 1 and rest:
        parts.append(f"{rest:.{decimals}f} s")
    return "+" + " ".join(parts)


class TimeAxis:
    """Maps moments to x, in proportion to time; see the module's docstring for what lies ahead.

    ``happened`` are the moments that have come (starts, ends, events received, now), ``planned``
    those that may still be to come (the end of a sleep, a deadline, the next attempt).
    """

    def __init__(self, happened, planned, left: float, width: float):
        happened, planned = sorted(happened), sorted(planned)
        self.start = happened[0] if happened else planned[0]
        self.last = happened[-1] if happened else self.start  # the last thing that happened
        self.end = max([self.last, *planned])
        self.left, self.right = left, left + width
        past = (self.last - self.start).total_seconds()
        ahead = (self.end - self.last).total_seconds()
        self.ahead = ahead
        self.shortened = past > 0 and ahead > AHEAD_SHARE * (past + ahead)
        # Where the axis is broken to shorten the time ahead (None: not shortened).
        self.break_x: float | None
        if self.shortened:
            self.break_x = left + width * (1 - AHEAD_SHARE)
            self.per_second = (self.break_x - left) / past
            self.ahead_per_second = (self.right - self.break_x) / ahead
        else:
            self.break_x = None
            total = past + ahead
            self.per_second = width / total if total else 0
            self.ahead_per_second = self.per_second

    def x(self, moment: datetime) -> float:
        if self.shortened and moment > self.last:
            x = self.break_x + (moment - self.last).total_seconds() * self.ahead_per_second
        else:
            x = self.left + (moment - self.start).total_seconds() * self.per_second
        return min(max(x, self.left), self.right)

    def ticks(self, origin: datetime) -> list[tuple[float, str]]:
        """``(x, label)`` of each tick: round offsets since ``origin``, as close as their labels allow.
        The part squeezed ahead gets one tick, at its end."""
        first = (self.start - origin).total_seconds()
        last = ((self.last if self.shortened else self.end) - origin).total_seconds()
        # Without a span to divide (everything at one moment), the start alone is labelled.
        ticks = [(self.left, "+" + human_duration(first) if first > 0 else "+0")]
        for step in TICK_STEPS:
            apart = step * self.per_second
            if apart < TICK_SPACING:
                continue
            numbers = range(math.ceil(first / step - 1e-9), math.floor(last / step + 1e-9) + 1)
            labels = [tick_label(n * step, step) for n in numbers]
            if labels and apart >= max(len(label) for label in labels) * TEXT_CHAR + 16:
                ticks = [
                    (self.left + (n * step - first) * self.per_second, label)
                    for n, label in zip(numbers, labels, strict=True)
                ]
                break
        if self.shortened:
            ticks.append((self.right, "+" + human_duration((self.end - origin).total_seconds())))
        return ticks
