"""The replay engine: runs ``run()`` from the top, answering finished steps from the journal.

One replay holds the instance's lease, loads the journal in one query, and
calls ``run(event, step)``. A step found in the journal returns its journaled
result (or raises its journaled error) without running again; a step not
found runs, is journaled, and the replay goes on. A step that must wait (a
sleep, a retry delay, an event not yet here) raises ``Suspend``; the engine
records why and until when, releases the lease, and the worker is free.
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
import traceback
from datetime import datetime, timedelta
from typing import NoReturn

from django.db import DatabaseError

from django_workflows import async_run, clock, lifecycle, rollbacks, telemetry
from django_workflows.conf import HARD_STEP_LIMIT, workflow_settings
from django_workflows.control_flow import Fenced, StoreError, Suspend, Terminating
from django_workflows.definition import WorkflowEvent, registry
from django_workflows.error_journal import USER_FAILURES, describe_error
from django_workflows.errors import (
    CpuTimeLimitExceeded,
    InstanceTerminated,
    InvalidStepInput,
    NonDeterminismError,
    PoisonInstance,
    StepInTransaction,
    StepLimitExceeded,
    StepResultError,
    WorkflowError,
    WorkflowNotFound,
)
from django_workflows.executors import enqueue
from django_workflows.models import Instance, InstanceStatus, StepStatus
from django_workflows.options import WorkflowOptions, limited
from django_workflows.serialization import NotJournalable, encode, storable_text
from django_workflows.signals import replay_finished, replay_started
from django_workflows.step import JournaledSteps, WorkflowStep
from django_workflows.store import children, leases, retention
from django_workflows.store.journal import (
    WAITING_UNLESS_PAUSE_ASKED,
    Costs,
    Entry,
    JournalWriter,
    encoded,
    load,
)
from django_workflows.validation import validate_step_name

# After a StoreError: when the wake-up loop replays the instance again, and the pauses between the
# attempts to give its lease back (the database may be restarting or failing over).
ABANDONED_REPLAY_DELAY = timedelta(seconds=2)
# How long an instance whose workflow is not registered here waits before a worker looks again: long
# enough not to spin while the deploy finishes, short enough that the new workers pick it up soon.
UNREGISTERED_RECHECK = timedelta(seconds=30)
ABANDON_PAUSES = (0.0, 0.5, 2.0)
logger = logging.getLogger("django_workflows.replay")


def replay(instance_pk: int) -> bool:
    """Run one replay of the instance if it is runnable; return whether one ran.

    Any number of deliveries of the same replay may arrive, from any number of
    workers: the conditional UPDATE that takes the lease lets one through, and
    the others return at once.
    """
    taken = time.monotonic()
    now = clock.now()
    instance = leases.take(instance_pk, str(leases.holder()), now, workflow_settings.LEASE_SECONDS)
    if instance is None:
        return False
    signal_args = {"instance_pk": instance_pk, "instance_id": instance.instance_id, "epoch": instance.epoch,
                   "workflow_name": instance.workflow_name}
    started = time.time()
    if replay_started.receivers:
        replay_started.send_robust(sender=Instance, started=started, **signal_args)
    span = telemetry.start_replay(instance) if telemetry.ENABLED else None
    outcome, current = "fenced", Replay(instance, now, span)
    try:
        with leases.keeper.hold(instance_pk, instance.epoch, taken) as current.writer.lease:
            # With OpenTelemetry on, the replay's span is the current one while run() runs.
            outcome = current.run() if span is None else telemetry.run_in_span(span, current.run)
    except StoreError as exc:
        outcome = current.abandon(exc)
    finally:
        current.writer.close()
        if replay_finished.receivers:
            replay_finished.send_robust(sender=Instance, outcome=outcome, started=started,
                                        released=current.released or time.time(), **signal_args)
        if span is not None:
            telemetry.end_replay(span, outcome, current.failure)
        _hand_on(instance.workflow_name)
    return True


def _hand_on(workflow_name: str) -> None:
    """A replay of a workflow with a concurrency limit gave its slot back (ended, suspended, paused,
    abandoned, or was fenced): queue the oldest instances waiting for a slot, one per free slot. No timer
    and no polling: this is how a queued instance refused by the limit gets its next replay. Nothing for
    a workflow without one."""
    own = limited().get(workflow_name)
    if own is None or own.concurrency is None:
        return
    try:
        for pk in leases.hand_on(workflow_name, own.concurrency, clock.now()):
            enqueue(pk)
    except DatabaseError:
        # The sweeper hands on every limited workflow's free slots at each round.
        logger.warning("could not hand on the free slots of workflow %r", workflow_name, exc_info=True)


class Replay(JournaledSteps):
    def __init__(self, instance: leases.Claim, started_at: datetime | None = None, span=None):
        # The replay's CPU time: this thread's from here on, and that of the step bodies that ran in
        # other threads (step.all). Waiting (I/O, sleeps, locks) is in neither.
        self.thread = threading.get_ident()
        self.cpu_started = time.thread_time()
        self.cpu_elsewhere = 0.0
        # Seconds the step attempts of this replay took, end to end.
        self.step_wall = 0.0
        self.cpu_time_limit: float | None = None
        self.instance = instance
        self.pk = instance.pk
        self.writer = JournalWriter(instance.pk, instance.epoch)
        self.journal: dict[str, Entry] = {}
        self.occurrences: dict[str, int] = {}
        self.steps_taken = 0
        self.step_limit = workflow_settings.STEP_LIMIT
        self.fatal: WorkflowError | None = None
        # The suspension a step asked for: a bare ``except:`` in run() may swallow it, but every later
        # step raises it again, and the replay suspends as asked whatever run() does next.
        self.suspended: Suspend | None = None
        # How deep in atomic blocks the journal's connection was when run() began: a step called
        # deeper sits in a transaction run() opened, which a suspension would roll back.
        self.atomic_depth = 0
        # The journal's step keys in the order they were first written (step.patched's markers left
        # out), and how many steps this replay has looked up: the n-th step called must be the n-th
        # journaled one.
        self.journaled_order: list[str] | None = None
        self.steps_called = 0
        # How many step keys run() has taken (an async run() takes them as it calls its steps, before
        # they are looked up): where a step.patched stands among the steps.
        self.keys_taken = 0
        # step.patched's answers in this replay, by change id; the markers an async run() asked for
        # while its event loop ran, written once it is idle (async_run), when markers_deferred.
        self.patches: dict[str, bool] = {}
        self.markers_deferred = False
        self.pending_markers: list[dict] = []
        # The key of the step whose body is running: an interruption by its timeout may arrive
        # meanwhile, so the engine must not touch the journal until it returns.
        self.running_step: str | None = None
        # The workflow's declared events by type (None: it accepts any type), read once per replay.
        self.declared_events: dict | None = None
        self.result_limit = workflow_settings.MAX_STEP_RESULT_SIZE
        # Wall-clock time just before the write that releases the lease, for replay_finished.
        self.released: float | None = None
        # Each step's journal entry (or None), by key, from where run() first reached it.
        self.examined: dict[str, Entry | None] = {}
        # Steps that succeeded with an undo, in the order they succeeded (rollbacks.PendingUndo).
        self.rollbacks: list = []
        self.undoing: str | None = None
        # terminate(rollback=True) was asked: run() stops at the first unfinished step, the undos run.
        self.terminating = bool(instance.terminating)
        self.rolling_back = False
        # When the lease was taken (the database's clock): how late a timer fired is measured from it.
        self.started_at = started_at
        # The replay's OpenTelemetry span, if it records (None with telemetry off, with no SDK configured,
        # or when the sampler dropped it): each step attempt's span is its child.
        self.span = span if span is not None and span.is_recording() else None
        # What ended the replay in error (the instance's error, or a failed statement), for its span.
        self.failure: BaseException | None = None
        # Signals and log records of the instance's life; run inside a transaction (a test's, an inline
        # replay in an atomic request), the signals wait for its commit.
        self.report = lifecycle.Reporter(instance.pk, instance.instance_id, instance.workflow_name)
        if self.writer.connection.in_atomic_block:
            self.report.alias = self.writer.alias

    # The outcome of the whole replay.

    def run(self) -> str:
        """Run the replay; return its outcome (the status it left, or "fenced")."""
        try:
            return self._run()
        except Fenced:
            # Terminated, restarted or taken over while this replay ran: its work is not ours to record.
            self.report.fenced()
            return "fenced"

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
                released = self.writer.abandon(now, now + ABANDONED_REPLAY_DELAY, self.costs())
            except DatabaseError:
                continue
            return "abandoned" if released else "fenced"
        return "abandoned"

    def _run(self) -> str:
        instance = self.instance
        poison_limit = workflow_settings.POISON_LIMIT
        if instance.crash_count >= poison_limit:
            return self.errored(PoisonInstance(
                f"Instance {instance} was parked: {instance.crash_count} replays in a row ended with the "
                f"worker gone before they finished (the limit is POISON_LIMIT = {poison_limit}). A step "
                "probably kills or hangs its process (memory, a segfault, a timeout of the task queue). "
                "Fix the step, then restart() the instance.",
                crash_count=instance.crash_count,
            ), "")
        try:
            workflow_class = registry.get(instance.workflow_name)
        except WorkflowNotFound:
            return self.await_registration()
        workflow_options = WorkflowOptions.of(workflow_class)
        self.declared_events = workflow_options.events
        self.step_limit = workflow_options.step_limit
        try:
            self.cpu_time_limit = workflow_options.cpu_time_limit.total_seconds()
        except WorkflowError as exc:  # a value manage.py check reports (E019)
            return self.errored(exc, "")
        if instance.status == InstanceStatus.WAITING_FOR_PAUSE:
            return self.suspend(Suspend(pause=True))
        # Epoch 1 is the first lease ever taken on the instance (terminate and restart bump it
        # too), and journal rows are only written under a lease: there is nothing to load.
        self.journal = load(self.pk) if instance.epoch > 1 else {}
        self.atomic_depth = len(self.writer.connection.atomic_blocks)
        event = WorkflowEvent(
            payload=instance.params,
            timestamp=instance.created_at,
            instance_id=instance.instance_id,
            workflow_name=instance.workflow_name,
        )
        self.report.started(instance.epoch, bool(self.journal))
        try:
            workflow = workflow_class()
            if inspect.iscoroutinefunction(workflow.run):
                output = async_run.drive(self, workflow.run, event)
            else:
                output = workflow.run(event, WorkflowStep(self))
        except Terminating:
            return self.terminate_rolling_back()
        except Suspend as suspension:
            if self.fatal is not None:
                return self.errored(self.fatal, "")
            return self.suspend(suspension)
        except USER_FAILURES as exc:
            if self.fatal is None and self.suspended is not None:
                # run() swallowed a suspension, then failed (a hand-written retry loop giving up):
                # the step it swallowed has not failed, it waits.
                return self.suspend(self.suspended)
            # SystemExit and KeyboardInterrupt raised by the workflow's own code fail the instance
            # instead of the worker: django-q2's workers ignore SIGINT, so they cannot be an operator's.
            failure_traceback = traceback.format_exc()
            if self.terminating and self.fatal is None:
                return self.terminate_rolling_back()
            if self.fatal is None and self.rollbacks:
                return self.roll_back(exc, failure_traceback)
            return self.errored(self.fatal or exc, failure_traceback)
        if self.fatal is not None:
            return self.errored(self.fatal, "")
        if self.terminating:
            # run() swallowed the stop, or every step it called was journaled: terminate all the same.
            return self.terminate_rolling_back()
        if self.suspended is not None:
            # run() swallowed a suspension and returned: the instance is not done, it waits.
            return self.suspend(self.suspended)
        return self.complete(output)

    def _finish(self, end: dict | None = None, **fields) -> str | bool | None:
        """Release the lease with ``fields``; ``end`` is what a child workflow's parent receives as it
        ends (``children.end_payload``), sent in the same transaction. An instance without a parent
        writes one statement, as ever."""
        self.released = time.time()
        if "ended_at" in fields:
            # Ending: when the instance's own retention deletes it, written by the same statement.
            fields["purge_at"] = retention.own_purge_at(fields["status"], fields["ended_at"],
                                                        self.instance.success_retention,
                                                        self.instance.error_retention)
        if end is not None and self.instance.parent_id is not None:
            return self.writer.release_ending_child(self.instance.parent_id, end, clock.now(), costs=self.costs(),
                                                    **fields)
        return self.writer.release(clock.now(), costs=self.costs(), **fields)

    # What the replay costs.

    def cpu_used(self) -> float:
        """Seconds of CPU time this replay has used so far, in every thread it ran a step body in."""
        return time.thread_time() - self.cpu_started + self.cpu_elsewhere

    def costs(self) -> Costs:
        """What the replay adds to the instance's totals as it ends."""
        return Costs(cpu_ms=self.cpu_used() * 1000, step_wall_ms=self.step_wall * 1000)

    def count_cost(self, attempt) -> None:
        """Count a step attempt's cost; called in this replay's thread, whichever thread ran the body.
        A body that ran here is in this thread's CPU time already."""
        self.step_wall += attempt.wall
        if attempt.thread != self.thread:
            self.cpu_elsewhere += attempt.cpu

    def cpu_time_exceeded(self, step: str) -> CpuTimeLimitExceeded | None:
        """The error that stops the replay before ``step`` if it used more CPU time than its limit."""
        if self.cpu_time_limit is None:
            return None
        used = self.cpu_used()
        if used <= self.cpu_time_limit:
            return None
        limit = self.cpu_time_limit
        return CpuTimeLimitExceeded(
            f"Instance {self.instance} used {_seconds_over(used, limit)} s of CPU in one replay, over its "
            f"cpu_time_limit of {limit:g} s; it was stopped at step {step!r}. Waiting on I/O, sleeps and "
            "waits for events do not count. Raise cpu_time_limit on the workflow class (at most 5 "
            "minutes), or spread the work over replays (each step.sleep or wait for an event starts a "
            "new one).",
            step=step, limit_ms=round(limit * 1000, 3), used_ms=round(used * 1000, 3),
        )

    def check_cpu_time(self, step: str) -> None:
        exceeded = self.cpu_time_exceeded(step)
        if exceeded is not None:
            self.fail_fatally(exceeded)

    def complete(self, output) -> str:
        try:
            text, _ = encode(output, self.result_limit)
        except NotJournalable as exc:
            return self.errored(StepResultError(f"The output of run() {exc}"), "")
        now = clock.now()
        end = children.end_payload(InstanceStatus.COMPLETE, json.loads(text)) if self.instance.parent_id else None
        if not self._finish(end, status=InstanceStatus.COMPLETE, output=encoded(text), ended_at=now, wake_at=None,
                            waiting_for=None, current_step=""):
            raise Fenced()
        self.report.completed(output)
        return InstanceStatus.COMPLETE

    def undo_all(self, error: BaseException) -> dict:
        """Run the remembered undos, last first, and return the rollback's outcome; an undo that must
        wait (a retry's delay) raises its ``Suspend``."""
        undone = len(self.rollbacks)
        self.rolling_back = True
        try:
            self.rollback_all(error)
        except USER_FAILURES as undo_failure:
            if self.fatal is not None:
                raise self.fatal from None
            described = describe_error(undo_failure)
            del described["type"]
            described.pop("args", None)
            # The undo that failed was taken off the list; those before it were undone.
            return rollbacks.outcome(undone - len(self.rollbacks) - 1, failed_step=self.undoing, error=described)
        return rollbacks.outcome(undone)

    def roll_back(self, failure: BaseException, failure_traceback: str) -> str:
        """run() failed after steps with undos succeeded: run the undos, then error the instance with the
        failure and the rollback's outcome."""
        try:
            outcome = self.undo_all(failure)
        except Suspend as suspension:
            return self.errored(self.fatal, "") if self.fatal is not None else self.suspend(suspension)
        except WorkflowError as fatal:
            return self.errored(fatal, "")
        return self.errored(failure, failure_traceback, rollback=outcome)

    def terminate_rolling_back(self) -> str:
        """terminate(rollback=True): run the undos of the steps run() reached, then end terminated."""
        stop = InstanceTerminated(f"Instance {self.instance} was terminated with rollback.")
        try:
            outcome = self.undo_all(stop)
        except Suspend as suspension:
            if self.fatal is not None:
                return self.errored(self.fatal, "")
            return self.suspend(suspension)
        except WorkflowError as fatal:
            return self.errored(fatal, "")
        error = {**describe_error(stop), "rollback": outcome}
        end = children.end_payload(InstanceStatus.TERMINATED, error=dict(error)) if self.instance.parent_id else None
        del error["type"]
        error.pop("args", None)
        if not self._finish(end, status=InstanceStatus.TERMINATED, terminating=False, error=error, ended_at=clock.now(),
                            wake_at=None, waiting_for=None, current_step=""):
            raise Fenced()
        self.report.terminated(outcome)
        return InstanceStatus.TERMINATED

    def errored(self, exc: BaseException, tb: str, rollback: dict | None = None) -> str:
        error = describe_error(exc)
        end = children.end_payload(InstanceStatus.ERRORED, error=dict(error)) if self.instance.parent_id else None
        del error["type"]
        error.pop("args", None)
        if rollback is not None:
            error["rollback"] = rollback
        now = clock.now()
        if not self._finish(end, status=InstanceStatus.ERRORED, error=error, traceback=storable_text(tb),
                            ended_at=now, wake_at=None, waiting_for=None):
            raise Fenced()
        self.failure = exc
        self.report.errored(exc, rollback)
        return InstanceStatus.ERRORED

    def await_registration(self) -> str:
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
        first_start = {"started_at": None} if self.instance.started_at == self.started_at else {}
        status = self._finish(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=wake_at, waiting_for=None,
                              waiting_reason=reason, crash_count=self.instance.crash_count, **first_start)
        if not status:
            raise Fenced()
        if status == InstanceStatus.PAUSED:
            self.report.paused("")
            return InstanceStatus.PAUSED
        self.report.unregistered(wake_at)
        return InstanceStatus.WAITING

    def suspend(self, suspension: Suspend) -> str:
        key = suspension.step_key
        if suspension.pause:
            if not self._finish(status=InstanceStatus.PAUSED, current_step=key):
                raise Fenced()
            self.report.paused(key)
            return InstanceStatus.PAUSED
        if not suspension.waiting_for:
            # Paused instead if a pause was asked meanwhile: the release says which.
            status = self._finish(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=suspension.wake_at,
                                  waiting_for=None, current_step=key)
            if not status:
                raise Fenced()
        else:
            self.released = time.time()
            status = self.writer.release_to_wait_for_events(clock.now(), suspension.waiting_for, self.costs(),
                                                            wake_at=suspension.wake_at, current_step=key)
            if status is None:
                raise Fenced()
            if status == InstanceStatus.QUEUED:
                # An event it waits for was in the inbox already: replayed again at once.
                enqueue(self.pk)
                return status
        if status == InstanceStatus.PAUSED:
            self.report.paused(key)
            return InstanceStatus.PAUSED
        self.report.waiting(key, "event" if suspension.waiting_for else suspension.reason or "sleep",
                            suspension.wake_at, suspension.waiting_for)
        return InstanceStatus.WAITING

    # Bookkeeping shared by the steps.

    def next_key(self, name) -> str:
        validate_step_name(name)
        self.check_step_call(name)
        count = self.occurrences.get(name, 0) + 1
        key = f"{name}-{count}"
        # Every step call is a step boundary: past its CPU time limit, the replay stops here.
        self.check_cpu_time(key)
        self.occurrences[name] = count
        self.keys_taken += 1
        return key

    def check_step_call(self, name: str) -> None:
        """Refuse a step (or a ``step.patched``) called where run() may not call one."""
        if self.fatal is not None:
            raise self.fatal
        if len(self.writer.connection.atomic_blocks) > self.atomic_depth:
            self.fail_fatally(StepInTransaction(
                f"Step {name!r} was called inside a transaction.atomic() block opened in run(). A step "
                "journals its result in its own commit, and a suspension would roll the block back while "
                "the step's side effect stays done. Move the atomic block inside the step's function "
                "(step.do(name, fn) with fn opening it), or split it into steps.",
                step=name,
            ))
        if self.running_step is not None:
            self.fail_fatally(InvalidStepInput(
                f"Step {name!r} was called inside the body of step {self.running_step!r}: call steps from "
                "run(), not from another step's function (a step's body may be interrupted by its "
                "timeout at any point, and may run again)",
                step=self.running_step,
            ))

    def fail_fatally(self, exc: WorkflowError) -> NoReturn:
        # Remembered, so the instance is errored even if run() catches it.
        self.fatal = exc
        raise exc

    def lookup(self, key: str, kind: str) -> Entry | None:
        # Looked up once per replay, where run() first reaches it: an async run() may look at a step
        # its event loop has not finished with in several rounds, and position counts the first.
        if key in self.examined:
            entry = self.examined[key]
        else:
            entry = self.examined[key] = self._lookup(key, kind)
        if self.terminating and not self.rolling_back and (
                entry is None or entry.status not in (StepStatus.SUCCEEDED, StepStatus.FAILED)):
            # Stopped before anything new runs, sleeps or waits: the undos of what ran come next.
            raise Terminating()
        return entry

    def _lookup(self, key: str, kind: str) -> Entry | None:
        position = self.steps_called
        self.steps_called += 1
        if self.journal:
            # step.patched's markers are not steps: they take no position (patches.py).
            order = self.step_order()
            if position < len(order) and order[position] != key:
                expected = order[position]
                self.fail_fatally(NonDeterminismError(
                    f"Instance {self.instance}: step {position + 1} of run() is {key!r}, but the journal has "
                    f"{expected!r} there (a step renamed, removed, inserted or reordered since the instance "
                    "began). run() must call the journaled steps in the same order on every replay; new steps "
                    "may only follow them. Deploy the change as a workflow of another name, or restart() the "
                    "instance to run it from the top under the new code.",
                    step=key, expected_step=expected, position=position + 1,
                ))
        entry = self.journal.get(key)
        if entry is not None and entry.kind != kind:
            self.fail_fatally(NonDeterminismError(
                f"Step {key!r} of instance {self.instance}: the journal has it as a {entry.kind} step, "
                f"but this replay reached it as a {kind} step. run() must call the same steps in the same "
                "order on every replay; to change a workflow's shape, give the new version another name "
                "or restart the instance.",
                step=key, journaled_kind=entry.kind, replayed_kind=kind,
            ))
        return entry

    def count_step(self, key: str, journaled: bool) -> None:
        self.steps_taken += 1
        if self.steps_taken > self.step_limit and not journaled:
            self.fail_fatally(StepLimitExceeded(
                f"Instance {self.instance} reached the step limit of {self.step_limit} steps "
                "(step.do; sleeps and waits for events do not count) at step "
                f"{key!r}. Set step_limit on the workflow class (at most {HARD_STEP_LIMIT}) "
                "or split the work across instances.",
                step=key, limit=self.step_limit,
            ))

    def after_write(self, status: str, key: str) -> None:
        if status == InstanceStatus.WAITING_FOR_PAUSE:
            raise Suspend(pause=True, step_key=key)


def _seconds_over(used: float, limit: float) -> str:
    """``used`` seconds to a tenth, or to as many decimals as it takes to read as more than ``limit``
    (0.25 s over a limit of 0.2 s, not "0.2 s")."""
    for digits in (1, 2):
        if round(used, digits) > limit:
            return f"{used:.{digits}f}"
    return f"{used:.3f}"
