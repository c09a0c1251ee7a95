"""An instance's deadline: the ``timeout`` a workflow class declares (or ``create(timeout=...)`` gives),
fixed as a moment when the instance is created.

The instance stores both its timeout and the deadline it comes to, so a deploy that changes the class's
``timeout`` moves no running instance's deadline, and a restart can give the instance its own timeout
again, measured from the restart. Past the deadline the instance ends ``errored`` with
``WorkflowTimeoutError`` (after the undos of its steps that declared one), whatever it waits on: every
wake time it stores is the earlier of its own and the deadline (``earliest``), so the worker's one
wake-up loop fires deadlines too, and no sweep of its own looks for them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django_workflows.shared.durations import format_duration, parse_duration
from django_workflows.errors import InvalidParams, InvalidStepInput, WorkflowTimeoutError

MAX_TIMEOUT = timedelta(days=3650)
"""The longest timeout an instance may have: ten years, far past any deadline a business keeps, and well
within what a date column holds."""


def parse_timeout(value: Any, what: str) -> timedelta:
    """``value`` as a timeout: milliseconds, "N unit(s)" or a timedelta, more than zero and at most
    ``MAX_TIMEOUT``; ``InvalidParams`` naming ``what`` otherwise."""
    try:
        timeout = parse_duration(value, what=what)
    except InvalidStepInput as exc:
        raise InvalidParams(str(exc)) from None
    except OverflowError:
        timeout = MAX_TIMEOUT + timedelta(days=1)  # past what a timedelta holds: longer than any timeout
    if not timedelta(0) < timeout <= MAX_TIMEOUT:
        raise InvalidParams(f"{what}: must be more than zero and at most {MAX_TIMEOUT.days} days, got {value!r}; "
                            "leave it out for no deadline.")
    return timeout


def deadline_after(start: datetime, timeout: timedelta | None) -> datetime | None:
    """The deadline of an instance with ``timeout`` created (or restarted) at ``start``; None without one."""
    return None if timeout is None else start + timeout


def earliest(wake_at: datetime | None, deadline: datetime | None) -> datetime | None:
    """The wake time an instance stores: its own, or its deadline if that comes first (or it has no
    own wake time: a wait for an event without a timeout, a pause)."""
    if deadline is None:
        return wake_at
    return deadline if wake_at is None or deadline < wake_at else wake_at


def passed(deadline: datetime | None, now: datetime) -> bool:
    return deadline is not None and now >= deadline


def timeout_error(label: str, timeout: timedelta | None, deadline: datetime | None,
                  step: str = "") -> WorkflowTimeoutError:
    """The error an instance ends with past its ``deadline``; ``step``, the step it had reached, if any."""
    took = f" (its timeout of {format_duration(timeout)})" if timeout is not None else ""
    when = deadline.isoformat() if deadline is not None else ""
    where = f", at step {step!r}" if step else ""
    return WorkflowTimeoutError(
        f"Instance {label} ran past its deadline {when}{took}{where}. Give it a longer timeout (the "
        "workflow's timeout, or create(timeout=...)), or have it continue as new before then.",
        deadline=when, step=step)
