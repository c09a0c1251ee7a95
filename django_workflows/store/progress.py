"""The statements that read an instance's progress: the ``step.progress`` markers of its journal
(``django_workflows.engine.progress_steps`` writes them), latest first through their own partial index
(``dw_step_progress``), however long the journal."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from django_workflows.models import Step, StepKind


class Progress(NamedTuple):
    """One ``step.progress`` call: its value (JSON, typed values in the journal's tagged form), when it was
    written, and its journal row's id (what a stream has shown up to)."""

    value: Any
    at: datetime | None
    id: int


def _markers(instance_pk: int) -> Any:
    return Step.objects.filter(instance_id=instance_pk, kind=StepKind.PROGRESS)


def latest(instance_pk: int) -> Progress | None:
    """The instance's latest progress, or None if it has reported none (one query)."""
    row = _markers(instance_pk).order_by("-id").values_list("result", "ended_at", "id").first()
    return None if row is None else _progress(*row)


def since(instance_pk: int, after_id: int, limit: int = 100) -> list[Progress]:
    """The progress reported after the marker ``after_id`` (0: from the start), oldest first, at most
    ``limit`` (one query)."""
    rows = _markers(instance_pk).filter(id__gt=after_id).order_by("id").values_list("result", "ended_at", "id")
    return [_progress(*row) for row in rows[:limit]]


def _progress(result: Any, at: datetime | None, step_id: int) -> Progress:
    value = result.get("value") if isinstance(result, dict) else None
    return Progress(value, at, step_id)
