"""The approval queue: which waits are for a person (an event type the workflow declares as an
approval), which type a decision sends, and who may decide. The admin's pages and its index link
read it."""

from __future__ import annotations

from django.db.models import F, OuterRef, Subquery

from django_workflows.shared import declared_events
from django_workflows.shared.definition import registry
from django_workflows.errors import EventRefused, WorkflowNotFound
from django_workflows.models import Instance, InstanceStatus, Step
from django_workflows.shared.options import WorkflowOptions


def _approval_types(workflow_name: str) -> frozenset[str]:
    """The event types a person sends for a workflow by approving or rejecting
    (``WorkflowOptions.approval_types``). For a workflow no longer defined, nothing says which of
    its waits are for a person: empty."""
    try:
        return WorkflowOptions.of(registry.get(workflow_name)).approval_types
    except WorkflowNotFound:
        return frozenset()


def approval_awaited(instance: Instance) -> str | None:
    """The event type a decision sends to ``instance``: the first type its wait names that its
    workflow declares in ``approvals``. None when it waits for no such event (a webhook, a timer)."""
    if instance.status != InstanceStatus.WAITING or not instance.waiting_for:
        return None
    declared = _approval_types(instance.workflow_name)
    return next((event_type for event_type in instance.waiting_for if event_type in declared), None)


def decision_refused(user, instance: Instance, event_type: str | None) -> str | None:
    """Why ``user`` may not approve or reject (the event type's declared permission); None if they may."""
    if event_type is None:
        return None
    try:
        rules = declared_events.rules_of(instance.workflow_name)
        declared_events.authorize(rules, event_type, declared_events.ADMIN, user)
    except EventRefused as exc:
        return str(exc)
    return None


def awaiting_approval():
    """Instances whose wait is for a person: for an event type their workflow declares in
    ``approvals``. Oldest wait first, with when the wait began."""
    wait_began = Step.objects.filter(instance_id=OuterRef("pk"), key=OuterRef("current_step")).values(
        "started_at"
    )[:1]
    return (
        Instance.objects.waiting_for_any({name: _approval_types(name) for name in registry.names()})
        .annotate(waiting_since=Subquery(wait_began))
        .order_by(F("waiting_since").asc(nulls_last=True), "created_at", "id")
    )
