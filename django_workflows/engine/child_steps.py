"""What ``step.child`` does on the replay: a journaled step that creates the child instance, then a wait
for its end.

- The create step (``step.do`` named as the call, e.g. ``ship-1``) inserts the child, linked to its parent
  and to that step's key; its id is the one given, or one derived from the parent's id and the step's key.
  The insert is fenced by the replay's epoch, as its journal writes are: a parent terminated (or restarted,
  or leased elsewhere) meanwhile creates no child, which its terminate could not have reached.
  A crash after the insert and before the step's journal row runs the step again: the child it created
  is found and taken, not created twice. The step journals ``{workflow, id, pk, step}``.
- The wait (``<step key> (result)``, e.g. ``ship-1 (result)``) takes the child's end from the parent's
  inbox: an event of the engine's own type that the child's end stores there in the transaction that
  ends it (``store.children``), so an end that came first is taken at once. It is not a declared event
  of the parent's, and no one else can send it.
- The end gives the child's output, or raises its error in the parent with its class (a terminated
  child raises ``InstanceTerminated``).
- Every statement of both goes through the replay's ``JournalWriter``, the insert in the create step's body
  too: a database error in one is the engine's (``StoreError``), which abandons the replay, never an error
  that run() could catch or the create step could count as a failed attempt.

A collaborator of the replay (``step_host``), beside the waits it shares its rows with.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django_workflows.shared import clock, deadlines
from django_workflows.foundations.conf import workflow_settings
from django_workflows.foundations.control_flow import Suspend
from django_workflows.shared.definition import StepContext, registry
from django_workflows.shared.error_journal import rebuild_error
from django_workflows.errors import (
    InvalidInstanceId,
    InvalidStepInput,
    NonRetryableError,
    WorkflowTimeoutError,
)
from django_workflows.models import Instance, InstanceStatus, ParentEndPolicy, StepKind
from django_workflows.shared.options import WorkflowOptions, place
from django_workflows.shared.serialization import NotJournalable, dump, revive
from django_workflows.engine.step_host import StepHost
from django_workflows.store import children as store
from django_workflows.foundations.validation import MAX_INSTANCE_ID, is_workflow_name, validate_instance_id
from django_workflows.engine.waits import WaitRow, WaitSteps, finished

# How long a parent waits for its child's end: the longest wait there is.
CHILD_WAIT = timedelta(days=365)


class ChildIdTaken(NonRetryableError):
    """``step.child`` was given the id of an instance that is not this parent's child."""


@dataclass(frozen=True)
class ChildWait:
    """The arguments of a child's wait, as an async run() plans it."""

    created: dict[str, Any]


def wait_name(created: dict[str, Any]) -> str:
    """The name of the wait for a child's end, from what its create step journaled."""
    return f"{created['step']} (result)"


def child_instance_id(parent_workflow: str, parent_id: str, key: str) -> str:
    """The id of a child created without one: readable (the parent's id and the step's key), unique (a
    digest of both), and within the instance-id rule."""
    digest = hashlib.sha256(f"{parent_workflow}/{parent_id}/{key}".encode()).hexdigest()[:12]
    readable = re.sub(r"[^a-zA-Z0-9_-]+", "_", key)
    return f"{parent_id}--{readable}"[: MAX_INSTANCE_ID - len(digest) - 1] + f"-{digest}"


def is_child_creator(fn: Callable[..., Any]) -> bool:
    """Whether a step's body is the one that creates a child (``ChildSteps.child_creator``)."""
    return getattr(fn, "child_creator", False)


def outcome(payload: dict[str, Any]) -> Any:
    """The child's output, or its error raised again with its class."""
    if payload.get("status") == InstanceStatus.COMPLETE:
        return payload.get("output")
    error = payload.get("error") or {"name": "Error", "message": f"the child ended {payload.get('status')}"}
    raise rebuild_error(error)


class ChildSteps:
    """The replay's side of ``step.child``, given the host and the waits (a child's wait for its end is
    a wait row, whose event the child's end leaves in the inbox)."""

    __slots__ = ("host", "waits")

    def __init__(self, host: StepHost, waits: WaitSteps):
        self.host, self.waits = host, waits

    def child_creator(self, name: str, workflow: Any, params: Any, instance_id: str | None,
                      on_parent_end: str) -> Callable[[StepContext], dict[str, Any]]:
        """Check ``step.child``'s arguments; return the body of its create step."""
        if not is_workflow_name(workflow):
            raise InvalidStepInput(f"step.child({name!r}): {workflow!r} is not a workflow name")
        if instance_id is not None:
            try:
                validate_instance_id(instance_id)
            except InvalidInstanceId as exc:
                raise InvalidStepInput(f"step.child({name!r}): {exc}") from None
        if on_parent_end not in ParentEndPolicy.values:
            raise InvalidStepInput(f"step.child({name!r}): on_parent_end must be one of "
                                   f"{', '.join(map(repr, ParentEndPolicy.values))}, got {on_parent_end!r}")
        given = params
        try:
            _, params = dump(params, workflow_settings.MAX_PARAMS_SIZE)
        except NotJournalable as exc:
            raise InvalidStepInput(f"step.child({name!r}): the params {exc}") from None
        parent, writer = self.host.instance, self.host.writer

        def create(ctx: StepContext) -> dict[str, Any]:
            # Not registered in this process (a rolling deploy, a misspelt name): retried, then raised.
            # Its class's timeout gives it a deadline of its own, as create() would.
            child_class = registry.get(workflow)
            timeout = WorkflowOptions.of(child_class).timeout
            key = f"{ctx.step.name}-{ctx.step.count}"
            child_id = instance_id or child_instance_id(parent.workflow_name, parent.instance_id, key)
            now = clock.now()
            # The child class's queue and priority; params without its limit key fail the step, saying so.
            placement = place(child_class, given, None, now)
            child = Instance(workflow_name=workflow, instance_id=child_id, params=params,
                             status=InstanceStatus.QUEUED, created_at=now, updated_at=now, parent_id=parent.pk,
                             parent_step=key, on_parent_end=on_parent_end, timeout=timeout,
                             deadline=deadlines.deadline_after(now, timeout), **placement.fields())
            pk = writer.insert_child(child)
            if pk is None:
                raise ChildIdTaken(f"step.child({name!r}): workflow {workflow!r} already has an instance with id "
                                   f"{child_id!r}, which is not a child of this instance")
            return {"workflow": workflow, "id": child_id, "pk": pk, "step": key}

        create.child_creator = True  # type: ignore[attr-defined]  # the mark is_child_creator() reads
        return create

    def wait_for_child(self, name: str, created: dict[str, Any], key: str | None = None) -> Any:
        """Wait for the end of the child ``created`` (what its create step journaled); return its output
        or raise its error."""
        host, writer = self.host, self.host.writer
        types = [store.end_event_type(created["pk"])]
        key = key or host.next_key(name)
        entry = host.lookup(key, StepKind.WAIT)
        if entry is not None and finished(entry):
            return outcome(revive(entry.result["payload"]) if entry.typed else entry.result["payload"])
        row = WaitRow(key, name, entry, types, CHILD_WAIT)
        received = self.waits.consume(row)
        if received is not None:
            return outcome(received.payload)
        end = writer.child_end(created["pk"])
        if end is not None:
            # Finished, and its end not in the inbox: it ended just now (taken above on a second look), or
            # while this parent had finished, which was restarted since.
            received = self.waits.consume(row)
            if received is not None:
                return outcome(received.payload)
            now = clock.now()
            _, status = row.succeed(writer, {"type": types[0], "payload": end, "timestamp": now.isoformat()}, now)
            host.after_write(status, key)
            return outcome(revive(end))
        now = clock.now()
        if entry is None:
            row.start(writer, now)
        elif row.deadline <= now:
            timeout_error = WorkflowTimeoutError(
                f"Step {name!r}: child {created['workflow']}/{created['id']} did not end within {CHILD_WAIT.days} days",
                step=key, event_types=types,
            )
            _, status = row.time_out(writer, timeout_error)
            host.after_write(status, key)
            raise timeout_error
        raise Suspend(step_key=key, wake_at=row.deadline, waiting_for=types)
