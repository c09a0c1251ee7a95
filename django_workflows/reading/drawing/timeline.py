"""Draws an instance's journal as a timeline in SVG: one row per step, the events received at the bottom.

A step's row shows what the journal knows of it: each attempt of a ``step.do`` as a bar (green when it
succeeded, red when it failed) with the retry delays between attempts as dashed gaps, a sleep until its
wake time, a wait until the event that ended it (and who sent it) or its deadline. The rows take the
data shapes of ``django_workflows.reading.describe`` (``describe_step``, ``describe_event``), whose moments are
datetimes.

Where a moment lies on the axis, and how the ticks are labelled, is ``drawing.time_axis``'s business.
"""

from __future__ import annotations

import math
from datetime import datetime

from django_workflows.reading.drawing.attempts import draw_attempts
from django_workflows.reading.drawing.layout import (
    AXIS_HEIGHT,
    BAR_HEIGHT,
    EVENT_LANE,
    LABEL_LINE,
    LABEL_WIDTH,
    MARKER_TYPES,
    PATCH_ROW_HEIGHT,
    PLOT_WIDTH,
    ROW_HEIGHT,
    WIDTH,
    bar,
    diamond,
)
from django_workflows.reading.drawing.svg import Canvas, Drawing, fit
from django_workflows.reading.drawing.time_axis import (
    TEXT_CHAR,
    TimeAxis,
    human_duration,
    tick_label,
)

# human_duration and tick_label are the axis's; they may still be imported from here.
__all__ = ["Timeline", "human_duration", "render_timeline", "tick_label"]

def _step_moments(step: dict) -> tuple[list[datetime], list[datetime]]:
    """The moments of a step that have happened (starts, ends), and those it plans (the end of a
    sleep, a deadline, the next attempt), which may lie ahead."""
    happened = [step.get("start"), step.get("end")]
    for attempt in step.get("attempts") or ():
        happened += [attempt.get("start"), attempt.get("end")]
    # The deadline of a wait that got its event is not a moment of interest: it would stretch the
    # axis days past the end of the instance.
    deadline = step.get("deadline") if step.get("status") != "succeeded" else None
    planned = [step.get("until"), deadline, step.get("next_attempt")]
    return [m for m in happened if m is not None], [m for m in planned if m is not None]


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
        happened, planned = [origin] if first_number == 1 else [], []
        for step in steps:
            done, ahead = _step_moments(step)
            happened += done
            planned += ahead
        happened += [event["received"] for event in events]
        if now is not None:
            happened.append(now)
        if not happened and not planned:
            happened = [origin]
        self.scale = TimeAxis(happened, planned, LABEL_WIDTH, PLOT_WIDTH)
        self.sender_by_step = {event["consumed_by"]: event for event in events if event.get("consumed_by")}
        self.row_tops = [AXIS_HEIGHT]
        for step in steps:
            if step["type"] in MARKER_TYPES:
                self.row_tops.append(self.row_tops[-1] + PATCH_ROW_HEIGHT)
                continue
            placed = self.event_label(step)
            extra = LABEL_LINE if placed and placed[2] == "below" else 0
            self.row_tops.append(self.row_tops[-1] + ROW_HEIGHT + extra)

    def offset(self, moment: datetime) -> str:
        delta = (moment - self.origin).total_seconds()
        return ("+" if delta >= 0 else "−") + human_duration(abs(delta))

    def at(self, moment: datetime) -> str:
        return f"{moment.isoformat(sep=' ', timespec='milliseconds')} ({self.offset(moment)})"

    def event_label(self, step: dict) -> tuple[str, float, str] | None:
        """The label of the event that ended a wait, and where it goes: ``(text, x, "beside")`` right
        of the event's diamond when it fits there, else ``(text, x, "below")`` on a line under the
        bar (its x the text's right end). Never over the bar, whose colour would hide it."""
        end = step.get("end")
        if step["type"] != "waitForEvent" or step["status"] != "succeeded" or end is None:
            return None
        received = self.sender_by_step.get(step["key"])
        sender = received["sender"] if received and received.get("sender") else "unknown sender"
        types = " or ".join((step.get("config") or {}).get("type") or [])
        text = fit(f"{(step.get('output') or {}).get('type', types)} · {sender}", 240, TEXT_CHAR)
        x = self.scale.x(end)
        if x + 9 + len(text) * TEXT_CHAR <= WIDTH - 4:
            return text, x + 9, "beside"
        return text, max(x + 6, LABEL_WIDTH + 4 + len(text) * TEXT_CHAR), "below"

    def render(self) -> Drawing:
        canvas = Canvas()
        rows_bottom = self.row_tops[-1]
        height = rows_bottom + EVENT_LANE + 6
        self.axis(canvas, height)
        for index, step in enumerate(self.steps):
            self.row(canvas, index, step)
        self.event_lane(canvas, rows_bottom)
        if self.scale.shortened:
            self.axis_break(canvas, rows_bottom)
        if self.now is not None:
            x = self.scale.x(self.now)
            canvas.line(x, AXIS_HEIGHT - 8, x, height - 4, class_="dw-now", title=f"now: {self.at(self.now)}")
            canvas.text(x, AXIS_HEIGHT - 11, "now", text_anchor="middle", class_="dw-now-text")
        return canvas.render(WIDTH, height, css_class="dw-timeline", label="Timeline of the instance's steps")

    def axis(self, canvas: Canvas, height: float) -> None:
        canvas.line(LABEL_WIDTH, AXIS_HEIGHT, LABEL_WIDTH + PLOT_WIDTH, AXIS_HEIGHT, class_="dw-axis")
        for x, label in self.scale.ticks(self.origin):
            canvas.line(x, AXIS_HEIGHT - 4, x, height - 4, class_="dw-tick")
            canvas.text(x, AXIS_HEIGHT - 22, label, text_anchor="middle", class_="dw-tick-text")
        canvas.text(8, AXIS_HEIGHT - 22, "step", class_="dw-axis-title")
        queued = f"{self.origin:%Y-%m-%d %H:%M:%S %Z}"
        canvas.text(8, AXIS_HEIGHT - 8, f"time since queued at {queued}", class_="dw-axis-note")

    def axis_break(self, canvas: Canvas, rows_bottom: float) -> None:
        """Where the axis stops being to scale: a gap cut through the axis and the rows, so that a bar
        crossing it is seen to be broken, and the real length of what lies beyond."""
        scale = self.scale
        assert scale.break_x is not None  # drawn only on a shortened axis
        x = scale.break_x + 4
        title = (
            f"{human_duration(scale.ahead)} from {self.at(scale.last)} to {self.at(scale.end)}, "
            "drawn shorter than to scale"
        )
        canvas.rect(x, AXIS_HEIGHT - 6, 8, rows_bottom - AXIS_HEIGHT + 6, class_="dw-break", title=title)
        canvas.path(
            f"M{x - 3},{AXIS_HEIGHT + 5} L{x + 3},{AXIS_HEIGHT - 5} M{x + 5},{AXIS_HEIGHT + 5} "
            f"L{x + 11},{AXIS_HEIGHT - 5}",
            class_="dw-break-mark",
        )
        canvas.text(
            x + 14,
            AXIS_HEIGHT - 8,
            f"{human_duration(scale.ahead)} more, not to scale",
            class_="dw-axis-note dw-break-text",
            title=title,
        )

    def row(self, canvas: Canvas, index: int, step: dict) -> None:
        if step["type"] in MARKER_TYPES:
            self.patch_row(canvas, index, step)
            return
        top = self.row_tops[index]
        middle = top + ROW_HEIGHT / 2
        number = self.first_number + index
        current = step["key"] == self.current_key
        canvas.rect(
            0,
            top,
            WIDTH,
            self.row_tops[index + 1] - top,
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
            draw_attempts(canvas, step, middle, self.scale.x, self.at)
        elif kind == "sleep":
            self.sleep_row(canvas, step, middle)
        else:
            self.wait_row(canvas, step, middle)

    def patch_row(self, canvas: Canvas, index: int, step: dict) -> None:
        """A marker (step.patched's, step.set_tags's, step.progress's): a thin row with its key in small quiet type, and a tick on the axis
        where run() first reached it and took the patched code."""
        top, bottom = self.row_tops[index], self.row_tops[index + 1]
        middle = (top + bottom) / 2
        canvas.rect(0, top, WIDTH, bottom - top, class_="dw-row dw-row-patch")
        label = f"{self.first_number + index}. {step['key']}"
        title = {"tags": f"{label} · not a step: step.set_tags set tags here",
                 "progress": f"{label} · not a step: step.progress reported progress here"}.get(
            step["type"], f"{label} · not a step: run() took the code that step.patched guards from here")
        canvas.text(26, middle + 3.5, fit(label, LABEL_WIDTH - 40), class_="dw-patch-label", title=title)
        x = self.scale.x(step["start"])
        canvas.line(x, top + 3, x, bottom - 3, class_="dw-patch-mark", title=f"{step['key']}: {self.at(step['start'])}")

    def sleep_row(self, canvas: Canvas, step: dict, y: float) -> None:
        x = self.scale.x
        start, until = step["start"], step.get("until") or step["start"]
        length = human_duration((until - start).total_seconds())
        title = f"{step['key']}: sleeps from {self.at(start)} until {self.at(until)} ({length})"
        if step["status"] == "succeeded" or self.now is None:
            bar(canvas, x(start), x(until), y, "dw-bar dw-bar-sleep", title)
            return
        reached = min(max(self.now, start), until)
        bar(canvas, x(start), x(reached), y, "dw-bar dw-bar-sleep", title)
        bar(canvas, x(reached), x(until), y, "dw-bar dw-bar-sleep dw-bar-ahead", title)

    def wait_row(self, canvas: Canvas, step: dict, y: float) -> None:
        x = self.scale.x
        start, deadline, end = step["start"], step.get("deadline"), step.get("end")
        types = " or ".join((step.get("config") or {}).get("type") or [])
        if step["status"] == "succeeded" and end is not None:
            received = self.sender_by_step.get(step["key"])
            sender = received["sender"] if received and received.get("sender") else "unknown sender"
            event_type = (step.get("output") or {}).get("type", types)
            bar(
                canvas,
                x(start),
                x(end),
                y,
                "dw-bar dw-bar-wait",
                f"{step['key']}: waited for {types} from {self.at(start)}; "
                f"{event_type} arrived from {sender}",
            )
            diamond(
                canvas,
                x(end),
                y,
                "dw-event dw-event-consumed",
                f"{event_type} from {sender}, consumed at {self.at(end)}",
            )
            label = self.event_label(step)
            assert label is not None  # a wait that took its event: succeeded, with an end
            text, label_x, place = label
            if place == "beside":
                canvas.text(label_x, y + 4, text, class_="dw-event-text")
            else:
                canvas.text(label_x, y + BAR_HEIGHT / 2 + 12, text, class_="dw-event-text", text_anchor="end")
        elif step["status"] == "failed":
            end = end or deadline or start
            bar(
                canvas,
                x(start),
                x(end),
                y,
                "dw-bar dw-bar-wait dw-bar-timeout",
                f"{step['key']}: no {types} arrived by the deadline {self.at(end)}",
            )
        else:
            reached = min(max(self.now or start, start), deadline or start)
            bar(
                canvas,
                x(start),
                x(reached),
                y,
                "dw-bar dw-bar-wait",
                f"{step['key']}: waiting for {types} since {self.at(start)}",
            )
            if deadline is not None:
                bar(
                    canvas,
                    x(reached),
                    x(deadline),
                    y,
                    "dw-bar dw-bar-wait dw-bar-ahead",
                    f"{step['key']}: waits for {types} until the deadline {self.at(deadline)}",
                )
        if deadline is not None and deadline <= self.scale.end:
            canvas.line(
                x(deadline),
                y - 9,
                x(deadline),
                y + 9,
                class_="dw-deadline",
                title=f"deadline of {step['key']}: {self.at(deadline)}",
            )

    def event_lane(self, canvas: Canvas, top: float) -> None:
        canvas.rect(0, top, WIDTH, EVENT_LANE, class_="dw-row dw-event-lane")
        canvas.text(26, top + 20, "events received", class_="dw-row-label")
        canvas.text(26, top + 34, f"{len(self.events)} in this range", class_="dw-axis-note")
        labelled_to = -math.inf  # where the last label drawn ends: the next starts clear of it
        for event in self.events:
            received = event["received"]
            cx = self.scale.x(received)
            consumed = event.get("consumed_by")
            sender = event.get("sender") or "unknown sender"
            title = f"{event['type']} from {sender}, received {self.at(received)}; " + (
                f"consumed by {consumed}" if consumed else "buffered: no wait has taken it yet"
            )
            diamond(
                canvas,
                cx,
                top + 15,
                "dw-event " + ("dw-event-consumed" if consumed else "dw-event-buffered"),
                title,
            )
            text = fit(f"{event['type']} · {sender}", 164, TEXT_CHAR)
            width = len(text) * TEXT_CHAR
            # Centred under its diamond, but kept inside the plot at either end.
            left = min(max(cx - width / 2, LABEL_WIDTH), WIDTH - 4 - width)
            if left >= labelled_to + 6:
                canvas.text(left, top + 36, text, class_="dw-event-text")
                labelled_to = left + width


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
