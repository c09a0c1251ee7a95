"""The replay engine: runs ``run()`` from the top, answering finished steps from the journal.

One replay holds the instance's lease, loads the journal in one query, and
calls ``run(event, step)``. A step found in the journal returns its journaled
result (or raises its journaled error) without running again; a step not
found runs, is journaled, and the replay goes on. A step that must wait raises
``Suspend``; the engine records why and until when, and releases the lease.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn, TypeVar

from django.db import DatabaseError

from django_workflows.shared import clock, deadlines, lifecycle, telemetry
from django_workflows.engine import async_run
from django_workflows.engine.child_steps import ChildSteps
from django_workflows.engine.concurrent_steps import ConcurrentSteps
from django_workflows.foundations.conf import workflow_settings
from django_workflows.foundations.control_flow import ContinueAsNew, Fenced, StoreError, Suspend, Terminating
from django_workflows.shared.definition import WorkflowEvent, registry
from django_workflows.engine.do_steps import DoSteps
from django_workflows.shared.error_journal import USER_FAILURES
from django_workflows.errors import (
    CpuTimeLimitExceeded,
    InstanceTerminated,
    InvalidParams,
    InvalidStepInput,
    NonDeterminismError,
    PoisonInstance,
    StepInTransaction,
    StepLimitExceeded,
    WorkflowError,
    WorkflowNotFound,
)
from django_workflows.executors import enqueue
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.engine.markers import MarkerWriter
from django_workflows.models import Instance, InstanceStatus
from django_workflows.shared.options import WorkflowOptions, limited
from django_workflows.engine.patches import PatchSteps
from django_workflows.engine.progress_steps import ProgressSteps
from django_workflows.engine.replay_costs import ReplayCosts
from django_workflows.engine.replay_endings import Endings
from django_workflows.engine.replay_outcome import Ending, Outcome, decide
from django_workflows.engine.rollbacks import UndoSteps
from django_workflows.engine.tag_steps import TagSteps
from django_workflows.shared.serialization import NotJournalable, dump, revive
from django_workflows.signals import replay_finished, replay_started
from django_workflows.engine.step import WorkflowStep
from django_workflows.engine.step_host import Attempt
from django_workflows.engine.step_rows import StepRows
from django_workflows.store import leases
from django_workflows.store.holders import holder
from django_workflows.store.lease_keeper import keeper, let_go_at, take_held
from django_workflows.store.journal import Entry, JournalWriter, wake_sleeps_and_load
from django_workflows.foundations.validation import validate_step_name
from django_workflows.engine.waits import WaitSteps

logger = logging.getLogger("django_workflows.replay")  # its name in LOGGING settings since 0.1
T = TypeVar("T")


def replay(instance_pk: int) -> bool:
    """Run one replay of the instance if it is runnable; return whether one ran.

    Any number of deliveries of the same replay may arrive, from any number of workers: the conditional
    UPDATE that takes the lease lets one through, and the others return at once. An instance this thread
    created holding the lease (an inline create(), ``instance_rows``) has it taken already.
    """
    if (held := take_held(instance_pk)) is not None:
        claim: leases.Claim | None = held.claim
        taken, now = held.taken, held.now
    else:
        taken, now = time.monotonic(), clock.now()
        claim = leases.take(instance_pk, str(holder()), now, workflow_settings.LEASE_SECONDS)
    if (instance := claim) is None:
        return False
    if instance.pk != instance_pk:
        # It gave way to an instance of higher priority (leases.take): its own replay comes later.
        enqueue(instance_pk)
        instance_pk = instance.pk
    signal_args = {"instance_pk": instance_pk, "instance_id": instance.instance_id, "epoch": instance.epoch,
                   "workflow_name": instance.workflow_name}
    started = time.time()
    if replay_started.receivers:
        replay_started.send_robust(sender=Instance, started=started, **signal_args)
    span = telemetry.start_replay(instance) if telemetry.ENABLED else None
    outcome, current = "fenced", Replay(instance, now, span)
    endings = current.endings
    try:
        with keeper.hold(instance_pk, instance.epoch, taken, current.report.lease_lapsed) as current.writer.lease:
            # With OpenTelemetry on, the replay's span is the current one while run() runs.
            outcome = current.run() if span is None else telemetry.run_in_span(span, current.run)
    except StoreError as exc:
        outcome = endings.abandon(exc)
    finally:
        current.rows.disarm()
        current.writer.close()
        released = let_go_at(current.writer.lease, endings.released)
        if replay_finished.receivers:
            replay_finished.send_robust(sender=Instance, outcome=outcome, started=started, released=released,
                                        **signal_args)
        if span is not None:
            telemetry.end_replay(span, outcome, endings.failure)
        _hand_on(instance.workflow_name, instance.limit_key)
    return True


def _hand_on(workflow_name: str, limit_key: str) -> None:
    """A replay of a workflow with a concurrency limit gave its slot back (however it ended): queue the
    oldest instances waiting for a slot, one per free slot; how a queued instance refused by it gets its
    next replay, with no timer and no polling."""
    own = limited().get(workflow_name)
    if own is None or own.concurrency is None:
        return
    try:
        for pk in leases.hand_on(workflow_name, own, limit_key, clock.now()):
            enqueue(pk)
    except DatabaseError:
        # The sweeper hands on every limited workflow's free slots at each round.
        logger.warning("could not hand on the free slots of workflow %r", workflow_name, exc_info=True)


class Replay:
    """One replay of an instance: the ``StepHost`` its step calls run in, and how it ends.

    Where it stands in the journal is its cursor's; each kind of step is a collaborator built here with
    what it needs (``steps`` for step.do, ``waits``, ``children``, ``patches``, ``undos``, ``concurrent``
    for step.all); what it costs is ``costs``'s. How it ends is decided once run() is over
    (``replay_outcome.decide``), and the lease is given back by one statement (``_release``)."""

    def __init__(self, instance: leases.Claim, started_at: datetime | None = None, span: Any = None):
        self.instance = instance
        # When the lease was taken (the database's clock): how late a timer fired is measured from it.
        self.started_at = started_at
        self.writer = JournalWriter(instance.pk, instance.epoch)
        self.rows = StepRows(self.writer)
        # Signals and log records of the instance's life; run inside a transaction, they wait for its commit.
        self.report = lifecycle.Reporter(instance.pk, instance.instance_id, instance.workflow_name)
        self.report.alias = self.writer.alias if self.writer.in_caller_transaction else None
        self.cursor = JournalCursor(step_limit=workflow_settings.STEP_LIMIT)
        self.costs = ReplayCosts()
        self.endings = Endings(self)
        # Remembered, so the instance is errored even if run() catches it.
        self.fatal: WorkflowError | None = None
        # The suspension a step asked for: a bare ``except:`` in run() may swallow it, but every later
        # step raises it again, and the replay suspends as asked whatever run() does next.
        self.suspended: Suspend | None = None
        # step.continue_as_new's continuation, raised again by every later step call as a suspension is.
        self.continued: ContinueAsNew | None = None
        # Being stopped, terminated with rollback or past the deadline: run() stops at the first step the
        # journal has not finished (UndoSteps.stops_at), and the undos of what ran run instead; past the
        # deadline, the instance then errors. The key of the step it was stopped at, for the error's message.
        self.terminating, self.past_deadline = bool(instance.terminating), False
        self.stopped_at = ""
        # How deep in atomic blocks the journal's connection was when run() began: a step called
        # deeper sits in a transaction run() opened, which a suspension would roll back.
        self.atomic_depth = 0
        self.running_step: str | None = None
        # The replay's OpenTelemetry span, if it records (None with telemetry off, with no SDK configured,
        # or when the sampler dropped it): each step attempt's parent.
        self.span = span if span is not None and span.is_recording() else None
        # The collaborators, one per kind of step.
        self.undos = UndoSteps(self)
        self.steps = DoSteps(self, self.cursor, self.undos, workflow_settings.MAX_STEP_RESULT_SIZE)
        self.waits = WaitSteps(self)
        self.children = ChildSteps(self, self.waits)
        self.markers = MarkerWriter(self, self.cursor)
        self.patches = PatchSteps(self, self.cursor, self.markers)
        self.tags = TagSteps(self, self.markers)
        self.progress = ProgressSteps(self, self.markers)
        self.concurrent = ConcurrentSteps(self, self.steps)

    # The outcome of the whole replay.

    def run(self) -> str:
        """Run the replay; return its outcome (the status it left, or "fenced")."""
        try:
            return self._run()
        except Fenced:  # terminated, restarted or taken over meanwhile: its work is not ours to record
            self.report.fenced()
            return "fenced"

    def load_journal(self, journal: dict[str, Entry]) -> None:
        """Start from ``journal`` (the instance's rows by step key), with run() about to be called."""
        self.cursor.load(journal, str(self.instance))
        self.atomic_depth = len(self.writer.connection.atomic_blocks)

    def _run(self) -> str:
        instance = self.instance
        poison_limit = workflow_settings.POISON_LIMIT
        if instance.crash_count >= poison_limit:
            return self.endings.errored(PoisonInstance(
                f"Instance {instance} was parked: {instance.crash_count} replays in a row ended with the "
                f"worker gone before they finished (the limit is POISON_LIMIT = {poison_limit}). A step "
                "probably kills or hangs its process (memory, a segfault, a timeout of the task queue). "
                "Fix the step, then restart() the instance.",
                crash_count=instance.crash_count,
            ), "")
        try:
            workflow_class = registry.get(instance.workflow_name)
        except WorkflowNotFound:
            return self.endings.await_registration(self.started_at)
        workflow_options = WorkflowOptions.of(workflow_class)
        self.waits.declared_events = workflow_options.events
        self.cursor.step_limit = workflow_options.step_limit
        try:
            self.costs.cpu_time_limit = workflow_options.cpu_time_limit.total_seconds()
        except WorkflowError as exc:  # a value manage.py check reports (E019)
            return self.endings.errored(exc, "")
        if instance.status == InstanceStatus.WAITING_FOR_PAUSE:
            return self.endings.suspend(Suspend(pause=True))
        # Read with the lease on PostgreSQL (leases.take); elsewhere now, its due sleeps woken first.
        journal = instance.journal
        self.load_journal(journal if journal is not None else wake_sleeps_and_load(
            instance.pk, instance.epoch, self.started_at or clock.now(), not inspect.iscoroutinefunction(workflow_class.run)))
        self.check_deadline()
        self.report.started(instance.epoch, bool(self.cursor.journal))
        raised: BaseException | None = None
        output = None
        try:
            # Read inside: params naming a deleted row (StoredObjectMissing) error the instance, saying so.
            event = WorkflowEvent(
                payload=revive(instance.params),
                timestamp=instance.created_at,
                instance_id=instance.instance_id,
                workflow_name=instance.workflow_name,
            )
            workflow = workflow_class()
            if inspect.iscoroutinefunction(workflow.run):
                output = async_run.drive(self, workflow.run, event)
            else:
                self.rows.run_code = getattr(getattr(workflow.run, "__func__", None), "__code__", None)
                output = workflow.run(event, WorkflowStep(self))
        except (Terminating, Suspend, ContinueAsNew, *USER_FAILURES) as exc:
            raised = exc
        return self.end(decide(raised, output, fatal=self.fatal, suspended=self.suspended,
                               terminating=self.terminating, undos_remembered=bool(self.undos.pending),
                               continued=self.continued))

    def end(self, outcome: Outcome) -> str:
        """End the replay as ``outcome`` says; return the status it left."""
        ending, endings = outcome.ending, self.endings
        if ending is Ending.COMPLETE:
            return endings.complete(outcome.value, self.steps.result_limit)
        if ending is Ending.SUSPEND:
            return endings.suspend(outcome.value)
        if ending is Ending.TERMINATE:
            return self.time_out() if self.past_deadline else self.terminate_rolling_back()
        if ending is Ending.CONTINUE:
            return endings.continue_as_new(outcome.value)
        if ending is Ending.ROLL_BACK:
            return self.roll_back(outcome.value, outcome.traceback)
        return endings.errored(outcome.value, outcome.traceback)

    def roll_back(self, failure: BaseException, failure_traceback: str) -> str:
        """run() failed after steps with undos succeeded: run the undos, then error the instance with the
        failure and the rollback's outcome."""
        return self._after_undos(failure, lambda outcome: self.endings.errored(failure, failure_traceback,
                                                                               rollback=outcome))

    def terminate_rolling_back(self) -> str:
        """terminate(rollback=True): run the undos of the steps run() reached, then end terminated."""
        stop = InstanceTerminated(f"Instance {self.instance} was terminated with rollback.")
        return self._after_undos(stop, lambda outcome: self.endings.terminated(stop, outcome))

    def time_out(self) -> str:
        """Past its deadline: run the undos of the steps run() reached, if any declared one, then error
        the instance with ``WorkflowTimeoutError`` (and the rollback's outcome, if undos ran)."""
        instance = self.instance
        error = deadlines.timeout_error(str(instance), instance.timeout, instance.deadline, self.stopped_at)
        if not self.undos.pending:
            return self.endings.errored(error, "")
        return self._after_undos(error, lambda outcome: self.endings.errored(error, "", rollback=outcome))

    def check_deadline(self) -> None:
        """Stop run() at its next unfinished step if the instance's deadline has passed: at the start of
        the replay, and at every step call, so a replay running when it passes stops too. Not while it is
        being stopped already (terminated with rollback, or its undos running)."""
        if (self.instance.deadline is not None and not self.terminating
                and deadlines.passed(self.instance.deadline, clock.now())):
            self.past_deadline = self.terminating = True

    def continue_as_new(self, params: Any) -> NoReturn:
        """``step.continue_as_new(params)``: unwind run(); the replay ends the instance and starts its
        successor with ``params``."""
        self.check_step_call("continue_as_new")
        if self.instance.parent_id is not None:
            raise InvalidStepInput(
                f"Instance {self.instance} is a child workflow (step.child), and a child cannot continue as new: "
                "its parent waits for this instance's own end. Return from run() instead, and have the parent "
                "start the next child.")
        try:
            _, stored = dump(params, workflow_settings.MAX_PARAMS_SIZE)
        except NotJournalable as exc:
            raise InvalidParams(f"step.continue_as_new(): the params {exc}", too_large=exc.too_large) from None
        self.continued = ContinueAsNew(stored)
        raise self.continued

    def _after_undos(self, error: BaseException, then: Callable[[dict[str, Any]], str]) -> str:
        """Run the undos (their handlers receive ``error``), then end as ``then`` does with their outcome;
        an undo waiting out a retry's delay suspends the instance, and a fatal error errors it."""
        try:
            outcome = self.undos.undo_all(error, self.steps.do)
        except Suspend as suspension:
            return self.end(decide(suspension, None, fatal=self.fatal, suspended=None, terminating=False,
                                   undos_remembered=False))
        except WorkflowError as fatal:
            return self.endings.errored(fatal, "")
        return then(outcome)

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call a step (``do``, ``sleep``, ``wait_for_event``...), remembering a suspension it asks for."""
        if self.writer.fenced:  # the lease was lost and run() swallowed the Fenced: it stops here
            raise self.writer.fence()
        if self.suspended is not None:
            raise self.suspended
        if self.continued is not None:
            raise self.continued
        try:
            value = method(*args, **kwargs)
        except Suspend as suspension:
            self.suspended = suspension
            raise
        self.rows.arm()
        return value

    def next_key(self, name: str) -> str:
        # A step's row kept for the next write is written before this step goes on (step_rows), and a
        # pause asked meanwhile is taken here, as that step's own write would have taken it.
        if (written := self.rows.settle()) is not None:
            self.after_write(written[1], written[0])
        validate_step_name(name)
        self.check_step_call(name)
        key = self.cursor.take_key(name)
        # Every step call is a step boundary: past its CPU time limit, the replay stops here.
        exceeded = self.cpu_time_exceeded(key)
        if exceeded is not None:
            self.fail_fatally(exceeded)
        self.check_deadline()
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
        try:
            entry = self.cursor.examine(key, kind)
        except NonDeterminismError as exc:
            self.fail_fatally(exc)
        if self.terminating and self.undos.stops_at(entry):
            # Stopped before anything new runs, sleeps or waits: the undos of what ran come next.
            self.stopped_at = key
            raise Terminating()
        return entry

    def count_step(self, key: str, journaled: bool) -> None:
        try:
            self.cursor.count_step(key, journaled)
        except StepLimitExceeded as exc:
            self.fail_fatally(exc)

    def after_write(self, status: str, key: str) -> None:
        if status == InstanceStatus.WAITING_FOR_PAUSE:
            raise Suspend(pause=True, step_key=key)

    def count_cost(self, attempt: Attempt) -> None:
        self.costs.count(attempt)

    def cpu_time_exceeded(self, step: str) -> CpuTimeLimitExceeded | None:
        return self.costs.exceeded(self.cursor.instance, step)
