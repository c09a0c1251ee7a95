"""Child workflows in the store (``step.child``): creating a child linked to its parent, and sending its end
to the parent.

A child's end reaches its parent as an event of the engine's own type (``__wf-child-<child pk>``, which no
one else may send), with ``{status, output, error}`` as payload, stored in the parent's inbox in the
transaction that ends the child: a worker that dies after the child's end cannot lose it, and an end that
arrives before the parent waits for it is taken when the wait is reached. The parent's row is locked
first, then the child's, as a parent's terminate does (it reaches its children after its own row).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from django_workflows.models import FINISHED_STATUSES, Instance
from django_workflows.store import inbox
from django_workflows.foundations.validation import RESERVED_EVENT_PREFIX

CHILD_EVENT_PREFIX = f"{RESERVED_EVENT_PREFIX}child-"
SENDER = "child workflow"


def end_event_type(child_pk: int) -> str:
    """The event type of a child's end, in its parent's inbox."""
    return f"{CHILD_EVENT_PREFIX}{child_pk}"


def end_payload(status: str, output: Any = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the parent receives: ``error`` as ``error_journal.describe_error`` gives it (with its class)."""
    return {"status": str(status), "output": output, "error": error}


def lock_parent(parent_pk: int) -> None:
    """Lock the parent's row (PostgreSQL) before the child's: the order a parent's terminate takes them in."""
    Instance.objects.filter(pk=parent_pk).select_for_update().values_list("pk", flat=True).first()


def lock_parent_at(parent_pk: int, epoch: int) -> bool:
    """Lock the parent's row (PostgreSQL) if it is still at ``epoch``; whether it is. A terminate, a restart
    or another worker's lease has moved the epoch on otherwise."""
    return Instance.objects.filter(pk=parent_pk, epoch=epoch).select_for_update().values_list(
        "pk", flat=True).first() is not None


def send_end(child_pk: int, parent_pk: int, payload: dict[str, Any], now: datetime) -> None:
    """Store the child's end in the parent's inbox, waking the parent if it waits for it; nothing if the
    parent has finished or no longer exists. Call it in the transaction that ends the child."""
    inbox.deliver(parent_pk, end_event_type(child_pk), payload, sender=SENDER, now=now)


def finished_end(child_pk: int) -> dict[str, Any] | None:
    """The end of a child that has finished, read from its row, or None if it has not (or is gone). For a
    parent whose inbox lost the end event (the parent had finished when the child ended, and was
    restarted since): the row's error has no class, so it is raised as ``StepFailed`` with its name."""
    row = Instance.objects.filter(pk=child_pk).values("status", "output", "error").first()
    if row is None or row["status"] not in FINISHED_STATUSES:
        return None
    return end_payload(row["status"], row["output"], row["error"])


def children_of(pk: int) -> QuerySet[Instance]:
    """The instance's children, oldest first."""
    return Instance.objects.filter(parent_id=pk).order_by("created_at", "id")

