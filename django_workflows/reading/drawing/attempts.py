"""A ``step.do``'s row of the timeline: its attempts, the retry delays between them, and its CPU time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django_workflows.reading.drawing.layout import LABEL_WIDTH, MIN_BAR, WIDTH, bar
from django_workflows.reading.drawing.svg import Canvas
from django_workflows.reading.drawing.time_axis import TEXT_CHAR, human_duration, human_milliseconds


def draw_attempts(canvas: Canvas, step: dict[str, Any], y: float, x: Callable[[datetime], float],
                  at: Callable[[datetime], str]) -> None:
    """A step.do's row: each attempt a bar (green when it succeeded, red when it failed) at ``x`` of its
    moments, the retry delays between them dashed, the next attempt's mark, and the CPU time beside."""
    attempts = step.get("attempts") or []
    if not attempts:
        start, end = step["start"], step.get("end") or step["start"]
        bar(canvas, x(start), x(end), y, "dw-bar dw-bar-do", f"{step['key']}: {at(start)}")
    previous_end = None
    for attempt in attempts:
        start, end = attempt["start"], attempt["end"]
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
            f"{human_duration((end - start).total_seconds())}, at {at(start)}"
        )
        if attempt.get("cpu_ms") is not None:
            title += f" · CPU {human_milliseconds(attempt['cpu_ms'])}"
        error = attempt.get("error")
        if error:
            title += f" · {error.get('name')}: {error.get('message')}"
        bar(
            canvas,
            x(start),
            x(end),
            y,
            "dw-bar " + ("dw-attempt-ok" if attempt.get("success") else "dw-attempt-failed"),
            title,
        )
        previous_end = end
    next_attempt = step.get("next_attempt")
    _cpu_label(canvas, step, y, attempts, next_attempt, x)
    if next_attempt is not None and previous_end is not None:
        canvas.line(
            x(previous_end),
            y,
            x(next_attempt),
            y,
            class_="dw-retry-gap",
            title=f"retry delay until {at(next_attempt)}",
        )
        canvas.element(
            "circle",
            cx=x(next_attempt),
            cy=y,
            r=4,
            class_="dw-next-attempt",
            title=f"next attempt at {at(next_attempt)}",
        )

def _cpu_label(canvas: Canvas, step: dict[str, Any], y: float, attempts: list[dict[str, Any]],
               next_attempt: datetime | None, x: Callable[[datetime], float]) -> None:
    """The CPU time of a step.do's attempts, written beside its bars: right of the last (or of the
    next attempt's mark) where there is room, else left of the first; never over a bar."""
    cpu = step.get("cpu_ms")
    if cpu is None or not attempts:
        return
    text = f"CPU {human_milliseconds(cpu)}"
    title = f"{step['key']}: CPU time of its {len(attempts)} attempt{'s' * (len(attempts) > 1)}"
    if step.get("wall_ms") is not None:
        title += f", which took {human_milliseconds(step['wall_ms'])} end to end"
    width = len(text) * TEXT_CHAR
    right = max(x(attempts[-1]["end"]), x(attempts[-1]["start"]) + MIN_BAR)
    if next_attempt is not None:
        right = max(right, x(next_attempt) + 4)
    left = x(attempts[0]["start"])
    if right + 6 + width <= WIDTH - 4:
        canvas.text(right + 6, y + 4, text, class_="dw-cpu-text", title=title)
    elif left - 6 - width >= LABEL_WIDTH:
        canvas.text(left - 6, y + 4, text, class_="dw-cpu-text", text_anchor="end", title=title)
