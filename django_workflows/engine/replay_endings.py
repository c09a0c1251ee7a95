"""How a replay gives its instance's lease back: one statement, fenced by the epoch, that writes what
the replay came to (completed, errored, terminated, waiting, paused, continued as new, or abandoned
after a failed statement of the engine's own), the instance's costs, and, for a child that ends, the end its parent
receives, in the same transaction (``children.end_payload``).

A release that finds the lease no longer ours (terminated, restarted or taken over meanwhile) raises
``Fenced``: the replay's work is not ours to record.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import DatabaseError

from django_workflows import signals
from django_workflows.shared import clock, deadlines, families, large_values, lifecycle, routing
from django_workflows.foundations.control_flow import ContinueAsNew, Fenced, StoreError, Suspend
from django_workflows.shared.definition import registry
from django_workflows.shared.error_journal import describe_error, instance_error
from django_workflows.errors import InstanceAlreadyExists, StepResultError
from django_workflows.executors import enqueue
from django_workflows.models import Instance, InstanceStatus
from django_workflows.engine.replay_costs import ReplayCosts
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.serialization import NotJournalable, encode, storable_text
from django_workflows.store import children, leases, retention, successors
from django_workflows.store.journal import WAITING_UNLESS_PAUSE_ASKED, JournalWriter, encoded

# After a StoreError: when the wake-up loop replays the instance again, and the pauses between the
# attempts to give its lease back (the database may be restarting or failing over).
ABANDONED_REPLAY_DELAY = timedelta(seconds=2)
ABANDON_PAUSES = (0.0, 0.5, 2.0)
# How long an instance whose workflow is not registered here waits before a worker looks again: long
# enough not to spin while the deploy finishes, short enough that the new workers pick it up soon.
UNREGISTERED_RECHECK = timedelta(seconds=30)


class EndingReplay(Protocol):
    """What ending a replay reads of it: its instance, the writer of its journal rows (fenced by its
    epoch), its lifecycle's reporter and its costs so far."""

    instance: leases.Claim
    writer: JournalWriter
    report: lifecycle.Reporter
    costs: ReplayCosts


class Endings:
    """The ways a replay ends. Notes, for the replay's signals and span, when the lease was released and
    what ended the replay in error."""

    __slots__ = ("instance", "writer", "report", "costs", "released", "failure")

    def __init__(self, replay: EndingReplay):
        self.instance, self.writer = replay.instance, replay.writer
        self.report, self.costs = replay.report, replay.costs
        # Wall-clock time just before the write that releases the lease, for replay_finished.
        self.released: float | None = None
        # What ended the replay in error (the instance's error, or a failed statement), for its span.
        self.failure: BaseException | None = None

    def _release(self, **fields: Any) -> str:
        """Release the lease with ``fields``, the instance going on (waiting, paused); return its status."""
        self.released = time.time()
        status = self.writer.release(clock.now(), costs=self.costs.costs(), **fields)
        if not status:
            raise Fenced()
        return status

    def _end(self, status: str, end_error: dict[str, Any] | None = None, end_output: Any = None,
             **fields: Any) -> None:
        """Release the lease as the instance ends with ``status``; a child's parent receives its end
        (``end_output``, or ``end_error`` as ``describe_error`` gives it) in the same transaction. An
        instance without a parent writes one statement, as ever."""
        self.released = time.time()
        ended_at = clock.now()
        # When the instance's own retention deletes it, written by the same statement.
        purge_at = retention.own_purge_at(status, ended_at, self.instance.success_retention,
                                          self.instance.error_retention)
        fields.update(status=status, ended_at=ended_at, wake_at=None, waiting_for=None, purge_at=purge_at)
        parent = self.instance.parent_id
        if parent is None:
            released: object = self.writer.release(clock.now(), costs=self.costs.costs(), **fields)
        else:
            released = self.writer.release_ending_child(parent, children.end_payload(status, end_output, end_error),
                                                        clock.now(), costs=self.costs.costs(), **fields)
        if not released:
            raise Fenced()

    def complete(self, output: Any, result_limit: int) -> str:
        try:
            text, _ = encode(output, result_limit)
        except NotJournalable as exc:
            return self.errored(StepResultError(f"The output of run() {exc}"), "")
        # A parent receives the output itself, not a reference to a file that is deleted with this
        # child, which may be before the parent stops replaying.
        self._end(InstanceStatus.COMPLETE, end_output=json.loads(text) if self.instance.parent_id else None,
                  output=encoded(large_values.offload(text, self.instance.pk)), current_step="")
        self.report.completed(output)
        return InstanceStatus.COMPLETE

    def continue_as_new(self, continuation: ContinueAsNew) -> str:
        """End the instance ``complete`` (its output None) and start its successor with the continuation's
        params, in one transaction (``store.successors``): the next id of its family, the same workflow,
        subject, tags, retention, timeout (its deadline measured from now), queue, priority and limit key, the version of the code
        deployed now, and an empty journal."""
        instance = self.instance
        now = clock.now()
        successor = Instance(
            workflow_name=instance.workflow_name, instance_id=families.successor_id(instance.instance_id),
            params=continuation.params, status=InstanceStatus.QUEUED, created_at=now, updated_at=now,
            success_retention=instance.success_retention, error_retention=instance.error_retention,
            version=WorkflowOptions.of(registry.get(instance.workflow_name)).version, timeout=instance.timeout,
            deadline=deadlines.deadline_after(now, instance.timeout), predecessor_id=instance.pk,
            # The same run of the same thing, continued: its queue, priority and limit key (the customer
            # a keyed limit counts it for) go on with it; its turn comes from now.
            **routing.Placement(instance.queue, instance.priority, routing.turn(now, instance.priority, routing.aging()),
                                instance.limit_key).fields())
        if successors.id_taken(instance.workflow_name, successor.instance_id):
            return self.errored(InstanceAlreadyExists(
                f"Instance {instance} could not continue as new: workflow {instance.workflow_name!r} already has "
                f"an instance with id {successor.instance_id!r}, the id of its successor.",
                workflow=instance.workflow_name, instance_id=successor.instance_id), "")
        self.released = time.time()
        ended_at = clock.now()
        purge_at = retention.own_purge_at(InstanceStatus.COMPLETE, ended_at, instance.success_retention,
                                          instance.error_retention)
        successors.continue_as_new(self.writer, successor, ended_at, self.costs.costs(),
                                   status=InstanceStatus.COMPLETE, ended_at=ended_at, wake_at=None,
                                   waiting_for=None, purge_at=purge_at, output=None, current_step="")
        self.report.completed(None)
        lifecycle.announce(signals.instance_created, successor.pk, successor.instance_id, successor.workflow_name,
                           lifecycle.DEBUG, "created, continuing %s", instance.instance_id,
                           using=self.report.alias)
        return InstanceStatus.COMPLETE

    def abandon(self, error: StoreError | None = None) -> str:
        """A statement of the engine's own failed: give the lease back and let the wake-up loop replay
        the instance shortly. The connection is dropped first, whatever state the failure left it in.
        If the database cannot be reached for that either, the lease expires and the sweeper queues
        the instance again."""
        if error is not None:
            self.failure = error
            self.report.abandoned(error)
        connection = self.writer.connection
        for pause in ABANDON_PAUSES:
            time.sleep(pause)
            self.writer.close()
            connection.close()
            try:
                now = clock.now()
                released = self.writer.abandon(now, now + ABANDONED_REPLAY_DELAY, self.costs.costs())
            except DatabaseError:
                continue
            return "abandoned" if released else "fenced"
        return "abandoned"

    def errored(self, exc: BaseException, tb: str, rollback: dict[str, Any] | None = None) -> str:
        described = describe_error(exc)
        error = instance_error(described)
        if rollback is not None:
            error["rollback"] = rollback
        self._end(InstanceStatus.ERRORED, described, error=error, traceback=storable_text(tb))
        self.failure = exc
        self.report.errored(exc, rollback)
        return InstanceStatus.ERRORED

    def terminated(self, stop: BaseException, rollback: dict[str, Any]) -> str:
        """End the instance terminated with rollback, its undos' outcome ``rollback``."""
        error = {**describe_error(stop), "rollback": rollback}
        self._end(InstanceStatus.TERMINATED, error, terminating=False, error=instance_error(error), current_step="")
        self.report.terminated(rollback)
        return InstanceStatus.TERMINATED

    def await_registration(self, started_at: datetime | None) -> str:
        """The workflow is not registered in this process: an old worker in a rolling deploy, or a
        workflows.py that failed to import. Erroring the instance would end it for good over a state
        of the deployment, so it waits instead, its journal untouched, and the wake-up loop hands it
        to a worker again a little later: one that knows the class runs it from where it stopped."""
        name = self.instance.workflow_name
        reason = (
            f"workflow {name!r} is not registered in this process: waiting for a worker that knows it "
            "(a rolling deploy, or a workflows.py that failed to import: see manage.py check)"
        )
        if registry.import_errors:
            reason += f"; in this process {', '.join(sorted(registry.import_errors))} failed to import"
        wake_at = clock.now() + UNREGISTERED_RECHECK
        # Taking the lease noted the instance's first start; it did not start. Left noted, the start
        # would spend a place in its workflow's rate-limit window now, and the worker that knows the
        # class would find it started already and run it without asking the limit.
        first_start = {"started_at": None} if self.instance.started_at == started_at else {}
        status = self._release(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=wake_at, waiting_for=None,
                               waiting_reason=reason, crash_count=self.instance.crash_count, **first_start)
        if status == InstanceStatus.PAUSED:
            self.report.paused("")
            return InstanceStatus.PAUSED
        self.report.unregistered(wake_at)
        return InstanceStatus.WAITING

    def suspend(self, suspension: Suspend) -> str:
        key = suspension.step_key
        # Woken by its deadline if that comes first; once it has passed (the undos of an instance past it
        # waiting out a retry's delay), by its own wake time alone, not at once again and again.
        deadline = self.instance.deadline
        wake_at = suspension.wake_at if deadlines.passed(deadline, clock.now()) else deadlines.earliest(
            suspension.wake_at, deadline)
        if suspension.pause:
            self._release(status=InstanceStatus.PAUSED, current_step=key)
            self.report.paused(key)
            return InstanceStatus.PAUSED
        if not suspension.waiting_for:
            # Paused instead if a pause was asked meanwhile: the release says which.
            status = self._release(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=wake_at,
                                   waiting_for=None, current_step=key)
        else:
            self.released = time.time()
            waited = self.writer.release_to_wait_for_events(clock.now(), suspension.waiting_for, self.costs.costs(),
                                                            wake_at=wake_at, current_step=key)
            if waited is None:
                raise Fenced()
            status = waited
            if status == InstanceStatus.QUEUED:
                # An event it waits for was in the inbox already: replayed again at once.
                enqueue(self.instance.pk)
                return status
        if status == InstanceStatus.PAUSED:
            self.report.paused(key)
            return InstanceStatus.PAUSED
        self.report.waiting(key, "event" if suspension.waiting_for else suspension.reason or "sleep",
                            suspension.wake_at, suspension.waiting_for)
        return InstanceStatus.WAITING
