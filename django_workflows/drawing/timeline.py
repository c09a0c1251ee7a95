"""Draws an instance's journal as a timeline in SVG: one row per step, the events received at the bottom.

A step's row shows what the journal knows of it: each attempt of a ``step.do`` as a bar (green when it
succeeded, red when it failed) with the retry delays between attempts as dashed gaps, a sleep until its
wake time, a wait until the event that ended it (and who sent it) or its deadline. The rows take the
data shapes of ``django_workflows.describe`` (``describe_step``, ``describe_event``).

The time axis is compressed: a step may take two milliseconds and the wait after it three days, and a
linear axis would show one of them as nothing. The moments of interest (starts, ends, deadlines, events)
are placed in order, each gap between two consecutive moments drawn by the logarithm of its length; the
axis is labelled with real times, and every bar has its exact times in a tooltip.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from datetime import datetime

from django_workflows.drawing.svg import Canvas, Drawing, fit

LABEL_WIDTH = 270
PLOT_WIDTH = 790
RIGHT_MARGIN = 40
WIDTH = LABEL_WIDTH + PLOT_WIDTH + RIGHT_MARGIN
AXIS_HEIGHT = 38
ROW_HEIGHT = 28
BAR_HEIGHT = 12
EVENT_LANE = 46
MIN_BAR = 4
TICK_SPACING = 92


def when(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


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


class CompressedScale:
    """Maps moments to x, in order, each gap between consecutive moments log-proportional to its length."""

    def __init__(self, moments, left: float, width: float):
        self.moments = sorted(set(moments))
        gaps = [(b - a).total_seconds() for a, b in zip(self.moments, self.moments[1:], strict=False)]
        # +0.25 keeps moments a microsecond apart visibly apart.
        weights = [math.log10(1 + gap * 1000) + 0.25 for gap in gaps]
        total = sum(weights)
        self.xs = [left]
        for weight in weights:
            self.xs.append(self.xs[-1] + (weight / total) * width)
        self.left, self.right = left, left + width

    def x(self, moment: datetime) -> float:
        moments = self.moments
        if not moments:
            return self.left
        i = bisect_left(moments, moment)
        if i < len(moments) and moments[i] == moment:
            return self.xs[i]
        if i == 0:
            return self.xs[0]
        if i == len(moments):
            return self.xs[-1]
        a, b = moments[i - 1], moments[i]
        share = (moment - a) / (b - a)
        return self.xs[i - 1] + share * (self.xs[i] - self.xs[i - 1])

    def ticks(self, label) -> list[datetime]:
        """Moments to label on the axis: spaced apart, and none labelled like the one before it."""
        chosen: list[datetime] = []
        last_x, last_label = -math.inf, None
        for moment, x in zip(self.moments, self.xs, strict=True):
            if x - last_x >= TICK_SPACING and label(moment) != last_label:
                chosen.append(moment)
                last_x, last_label = x, label(moment)
        return chosen


def _step_moments(step: dict) -> list[datetime]:
    # The deadline of a wait that got its event is not a moment of interest: it would stretch the
    # axis days past the end of the instance.
    deadline = when(step.get("deadline")) if step.get("status") != "succeeded" else None
    moments = [
        when(step.get("start")),
        when(step.get("end")),
        when(step.get("until")),
        deadline,
        when(step.get("next_attempt")),
    ]
    for attempt in step.get("attempts") or ():
        moments += [when(attempt.get("start")), when(attempt.get("end"))]
    return [moment for moment in moments if moment is not None]


def _bar(canvas: Canvas, x1: float, x2: float, y: float, css: str, title: str, height: float = BAR_HEIGHT):
    canvas.rect(x1, y - height / 2, max(x2 - x1, MIN_BAR), height, rx=3, class_=css, title=title)


class Timeline:
    def __init__(
        self,
        steps: list[dict],
        events: list[dict],
        *,
        origin: datetime,
        now: datetime | None,
        first_number: int,
        current_key: str,
    ):
        self.steps, self.events = steps, events
        self.origin, self.now = origin, now
        self.first_number, self.current_key = first_number, current_key
        moments = [origin] if first_number == 1 else []
        for step in steps:
            moments += _step_moments(step)
        moments += [when(event["received"]) for event in events]
        if now is not None:
            moments.append(now)
        if not moments:
            moments = [origin]
        self.scale = CompressedScale(moments, LABEL_WIDTH, PLOT_WIDTH)
        self.sender_by_step = {event["consumed_by"]: event for event in events if event.get("consumed_by")}

    def offset(self, moment: datetime) -> str:
        delta = (moment - self.origin).total_seconds()
        return ("+" if delta >= 0 else "−") + human_duration(abs(delta))

    def at(self, moment: datetime) -> str:
        return f"{moment.isoformat(sep=' ', timespec='milliseconds')} ({self.offset(moment)})"

    def render(self) -> Drawing:
        canvas = Canvas()
        rows_bottom = AXIS_HEIGHT + ROW_HEIGHT * len(self.steps)
        height = rows_bottom + EVENT_LANE + 6
        self.axis(canvas, height)
        for index, step in enumerate(self.steps):
            self.row(canvas, index, step)
        self.event_lane(canvas, rows_bottom)
        if self.now is not None:
            x = self.scale.x(self.now)
            canvas.line(x, AXIS_HEIGHT - 8, x, height - 4, class_="dw-now", title=f"now: {self.at(self.now)}")
            canvas.text(x, AXIS_HEIGHT - 11, "now", text_anchor="middle", class_="dw-now-text")
        return canvas.render(WIDTH, height, css_class="dw-timeline", label="Timeline of the instance's steps")

    def axis(self, canvas: Canvas, height: float) -> None:
        canvas.line(LABEL_WIDTH, AXIS_HEIGHT, LABEL_WIDTH + PLOT_WIDTH, AXIS_HEIGHT, class_="dw-axis")
        for moment in self.scale.ticks(self.offset):
            x = self.scale.x(moment)
            canvas.line(x, AXIS_HEIGHT - 4, x, height - 4, class_="dw-tick")
            canvas.text(
                x,
                AXIS_HEIGHT - 22,
                self.offset(moment),
                text_anchor="middle",
                class_="dw-tick-text",
                title=moment.isoformat(sep=" ", timespec="milliseconds"),
            )
        canvas.text(8, AXIS_HEIGHT - 22, "step", class_="dw-axis-title")
        queued = f"{self.origin:%Y-%m-%d %H:%M:%S %Z}"
        canvas.text(8, AXIS_HEIGHT - 8, f"time since queued at {queued}", class_="dw-axis-note")

    def row(self, canvas: Canvas, index: int, step: dict) -> None:
        top = AXIS_HEIGHT + ROW_HEIGHT * index
        middle = top + ROW_HEIGHT / 2
        number = self.first_number + index
        current = step["key"] == self.current_key
        canvas.rect(
            0,
            top,
            WIDTH,
            ROW_HEIGHT,
            class_="dw-row" + (" dw-row-odd" if index % 2 else "") + (" dw-row-current" if current else ""),
        )
        kind = step["type"]
        canvas.element("circle", cx=14, cy=middle, r=5, class_=f"dw-dot dw-dot-{kind}")
        label = f"{number}. {step['key']}"
        canvas.text(
            26,
            middle + 4,
            fit(label, LABEL_WIDTH - 70),
            class_="dw-row-label",
            title=f"{label} · {kind} · {step['status']}",
        )
        canvas.text(
            LABEL_WIDTH - 8,
            middle + 4,
            step["status"],
            text_anchor="end",
            class_=f"dw-row-status dw-row-status-{step['status']}",
        )
        if kind == "do":
            self.do_row(canvas, step, middle)
        elif kind == "sleep":
            self.sleep_row(canvas, step, middle)
        else:
            self.wait_row(canvas, step, middle)

    def do_row(self, canvas: Canvas, step: dict, y: float) -> None:
        x = self.scale.x
        attempts = step.get("attempts") or []
        if not attempts:
            start, end = when(step["start"]), when(step.get("end")) or when(step["start"])
            _bar(canvas, x(start), x(end), y, "dw-bar dw-bar-do", f"{step['key']}: {self.at(start)}")
        previous_end = None
        for attempt in attempts:
            start, end = when(attempt["start"]), when(attempt["end"])
            if previous_end is not None:
                canvas.line(
                    x(previous_end),
                    y,
                    x(start),
                    y,
                    class_="dw-retry-gap",
                    title=f"retry delay {human_duration((start - previous_end).total_seconds())}",
                )
            outcome = "succeeded" if attempt.get("success") else "failed"
            title = (
                f"{step['key']} attempt {attempt.get('attempt')}: {outcome} after "
                f"{human_duration((end - start).total_seconds())}, at {self.at(start)}"
            )
            error = attempt.get("error")
            if error:
                title += f" · {error.get('name')}: {error.get('message')}"
            _bar(
                canvas,
                x(start),
                x(end),
                y,
                "dw-bar " + ("dw-attempt-ok" if attempt.get("success") else "dw-attempt-failed"),
                title,
            )
            previous_end = end
        next_attempt = when(step.get("next_attempt"))
        if next_attempt is not None and previous_end is not None:
            canvas.line(
                x(previous_end),
                y,
                x(next_attempt),
                y,
                class_="dw-retry-gap",
                title=f"retry delay until {self.at(next_attempt)}",
            )
            canvas.element(
                "circle",
                cx=x(next_attempt),
                cy=y,
                r=4,
                class_="dw-next-attempt",
                title=f"next attempt at {self.at(next_attempt)}",
            )

    def sleep_row(self, canvas: Canvas, step: dict, y: float) -> None:
        x = self.scale.x
        start, until = when(step["start"]), when(step.get("until")) or when(step["start"])
        length = human_duration((until - start).total_seconds())
        title = f"{step['key']}: sleeps from {self.at(start)} until {self.at(until)} ({length})"
        if step["status"] == "succeeded" or self.now is None:
            _bar(canvas, x(start), x(until), y, "dw-bar dw-bar-sleep", title)
            return
        reached = min(max(self.now, start), until)
        _bar(canvas, x(start), x(reached), y, "dw-bar dw-bar-sleep", title)
        _bar(canvas, x(reached), x(until), y, "dw-bar dw-bar-sleep dw-bar-ahead", title)

    def wait_row(self, canvas: Canvas, step: dict, y: float) -> None:
        x = self.scale.x
        start, deadline, end = when(step["start"]), when(step.get("deadline")), when(step.get("end"))
        types = " or ".join((step.get("config") or {}).get("type") or [])
        if step["status"] == "succeeded" and end is not None:
            received = self.sender_by_step.get(step["key"])
            sender = received["sender"] if received and received.get("sender") else "unknown sender"
            event_type = (step.get("output") or {}).get("type", types)
            _bar(
                canvas,
                x(start),
                x(end),
                y,
                "dw-bar dw-bar-wait",
                f"{step['key']}: waited for {types} from {self.at(start)}; "
                f"{event_type} arrived from {sender}",
            )
            self.diamond(
                canvas,
                x(end),
                y,
                "dw-event dw-event-consumed",
                f"{event_type} from {sender}, consumed at {self.at(end)}",
            )
            label = f"{event_type} · {sender}"
            if x(end) < LABEL_WIDTH + PLOT_WIDTH - 120:
                canvas.text(x(end) + 9, y + 4, fit(label, 240, 6), class_="dw-event-text")
            else:
                canvas.text(x(end) - 9, y + 4, fit(label, 240, 6), class_="dw-event-text", text_anchor="end")
        elif step["status"] == "failed":
            end = end or deadline or start
            _bar(
                canvas,
                x(start),
                x(end),
                y,
                "dw-bar dw-bar-wait dw-bar-timeout",
                f"{step['key']}: no {types} arrived by the deadline {self.at(end)}",
            )
        else:
            reached = min(max(self.now or start, start), deadline or start)
            _bar(
                canvas,
                x(start),
                x(reached),
                y,
                "dw-bar dw-bar-wait",
                f"{step['key']}: waiting for {types} since {self.at(start)}",
            )
            if deadline is not None:
                _bar(
                    canvas,
                    x(reached),
                    x(deadline),
                    y,
                    "dw-bar dw-bar-wait dw-bar-ahead",
                    f"{step['key']}: waits for {types} until the deadline {self.at(deadline)}",
                )
        if deadline is not None and deadline <= self.scale.moments[-1]:
            canvas.line(
                x(deadline),
                y - 9,
                x(deadline),
                y + 9,
                class_="dw-deadline",
                title=f"deadline of {step['key']}: {self.at(deadline)}",
            )

    def diamond(self, canvas: Canvas, cx: float, cy: float, css: str, title: str, size: float = 6) -> None:
        canvas.path(
            f"M{cx:.1f},{cy - size:.1f} L{cx + size:.1f},{cy:.1f} L{cx:.1f},{cy + size:.1f} "
            f"L{cx - size:.1f},{cy:.1f} Z",
            class_=css,
            title=title,
        )

    def event_lane(self, canvas: Canvas, top: float) -> None:
        canvas.rect(0, top, WIDTH, EVENT_LANE, class_="dw-row dw-event-lane")
        canvas.text(26, top + 20, "events received", class_="dw-row-label")
        canvas.text(26, top + 34, f"{len(self.events)} in this range", class_="dw-axis-note")
        last_label = -math.inf
        for event in self.events:
            received = when(event["received"])
            cx = self.scale.x(received)
            consumed = event.get("consumed_by")
            sender = event.get("sender") or "unknown sender"
            title = f"{event['type']} from {sender}, received {self.at(received)}; " + (
                f"consumed by {consumed}" if consumed else "buffered: no wait has taken it yet"
            )
            self.diamond(
                canvas,
                cx,
                top + 15,
                "dw-event " + ("dw-event-consumed" if consumed else "dw-event-buffered"),
                title,
            )
            if cx - last_label >= 170:
                canvas.text(
                    cx,
                    top + 36,
                    fit(f"{event['type']} · {sender}", 164, 6),
                    text_anchor="middle",
                    class_="dw-event-text",
                )
                last_label = cx


def render_timeline(
    steps: list[dict],
    events: list[dict],
    *,
    origin: datetime,
    now: datetime | None = None,
    first_number: int = 1,
    current_key: str = "",
) -> Drawing:
    """The timeline of ``steps`` (``describe_step`` dicts, in journal order) and ``events``
    (``describe_event`` dicts). ``now`` draws the present and the parts still ahead (an unfinished
    instance); ``first_number`` numbers the rows of a page that does not start at the first step."""
    return Timeline(
        steps, events, origin=origin, now=now, first_number=first_number, current_key=current_key
    ).render()
