"""Replaying journals against the code deployed now, to find the instances a code change would break.

``verify(instance)`` runs the workflow's ``run()`` over the instance's journal as a replay would, with
the same checks (``NonDeterminismError``: a step renamed, removed, inserted or reordered), but it
stops at the first step the journal has not finished: it runs no step body and writes nothing. A deploy
pipeline runs ``manage.py workflows verify`` before switching traffic; tests call
``django_workflows.testing.verify_journal``.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any

from django_workflows.engine.async_run import drive
from django_workflows.foundations.control_flow import EndOfJournal
from django_workflows.shared.definition import WorkflowEvent, registry
from django_workflows.errors import WorkflowNotFound
from django_workflows.models import FINISHED_STATUSES, Instance, StepStatus
from django_workflows.engine.markers import AlsoWrite, MarkerWriter
from django_workflows.engine.replay import Replay
from django_workflows.engine.step import WorkflowStep
from django_workflows.store.journal_entries import Entry, load
from django_workflows.shared.serialization import revive
from django_workflows.store.leases import Claim

_FINISHED_STEP = (StepStatus.SUCCEEDED, StepStatus.FAILED)


@dataclass(frozen=True)
class Divergence:
    """Why the code deployed now cannot go on with an instance."""

    workflow: str
    instance_id: str
    status: str
    error: str  # the error a replay would end the instance with
    message: str
    step: str | None = None  # the step run() asked for
    expected_step: str | None = None  # the step the journal has there

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Verification(Replay):
    """A replay that answers only from the journal and stops where a real one would run or write."""

    def lookup(self, key: str, kind: str) -> Entry:
        entry = super().lookup(key, kind)
        if entry is None or entry.status not in _FINISHED_STEP:
            # Raised again by every later step, should run() swallow it (Replay.call).
            end = EndOfJournal()
            # Not a Suspend: nothing may suspend a verification, whose replay ends where its journal does.
            self.suspended = end  # type: ignore[assignment]
            raise end
        return entry

    def __init__(self, claim: Claim):
        super().__init__(claim)
        self.markers = _UnwrittenMarkers(self, self.cursor)
        self.patches.markers = self.tags.markers = self.progress.markers = self.markers


class _UnwrittenMarkers(MarkerWriter):
    def write(self, marker: dict[str, Any], also: AlsoWrite | None) -> None:
        # Verifying reads the journal and changes nothing: a real replay would journal the marker (a patch's
        # answer is the new path, as here), its tags and its progress; nothing is written, and the next step
        # the journal has not finished stops it.
        pass


def verify(instance: Instance) -> Divergence | None:
    """Replay ``instance``'s journal against the registered code; None if it agrees."""

    def diverged(error: str, message: str, **where: Any) -> Divergence:
        return Divergence(instance.workflow_name, instance.instance_id, instance.status, error, message, **where)

    try:
        workflow_class = registry.get(instance.workflow_name)
    except WorkflowNotFound as exc:
        return diverged("WorkflowNotFound", str(exc))
    claim = Claim(instance.pk, instance.workflow_name, instance.instance_id, instance.params, instance.status,
                  instance.epoch, instance.created_at, instance.crash_count)
    replay = _Verification(claim)
    replay.load_journal(load(instance.pk))
    event = WorkflowEvent(payload=revive(instance.params), timestamp=instance.created_at,
                          instance_id=instance.instance_id, workflow_name=instance.workflow_name)
    try:
        workflow = workflow_class()
        if inspect.iscoroutinefunction(workflow.run):
            drive(replay, workflow.run, event)
        else:
            workflow.run(event, WorkflowStep(replay))
    except EndOfJournal:
        pass
    except Exception:  # noqa: BLE001
        # What run() makes of its journaled results (an error it raises) is not a code change's doing.
        pass
    fatal = replay.fatal
    if fatal is None:
        return None
    return diverged(type(fatal).__name__, str(fatal), step=getattr(fatal, "step", None),
                    expected_step=getattr(fatal, "expected_step", None))


def verify_unfinished(workflow_name: str | None = None) -> tuple[int, list[Divergence]]:
    """Verify every unfinished instance (of one workflow, or of all); return how many were verified,
    and the divergences found."""
    rows = Instance.objects.exclude(status__in=FINISHED_STATUSES).order_by("workflow_name", "id")
    if workflow_name is not None:
        rows = rows.filter(workflow_name=workflow_name)
    checked, found = 0, []
    for instance in rows.iterator(chunk_size=500):
        checked += 1
        divergence = verify(instance)
        if divergence is not None:
            found.append(divergence)
    return checked, found
