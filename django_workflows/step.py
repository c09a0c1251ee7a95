"""The step API: ``WorkflowStep``, the ``step`` that ``run(event, step)`` is given, and what each of its
calls does on the replay (``JournaledSteps``).

A step found finished in the journal answers from it without running again: its result, or its error
raised again. A step not found runs (``step.do``), or starts waiting (a sleep, an event), and is
journaled. A step that must wait raises ``Suspend``, and the replay ends there.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connections

from django_workflows import (
    atomic_steps,
    children,
    clock,
    concurrent_steps,
    patches,
    rollbacks,
    telemetry,
    waits,
)
from django_workflows.conf import workflow_settings
from django_workflows.control_flow import AttemptTimedOut, Suspend
from django_workflows.definition import WorkflowStepEvent
from django_workflows.error_journal import USER_FAILURES, describe_error, rebuild_error
from django_workflows.errors import (
    InvalidStepInput,
    NonRetryableError,
    StepResultError,
    StepTimeoutError,
)
from django_workflows.models import InstanceStatus, StepKind, StepStatus
from django_workflows.policy import StepPolicy, build_policy, default_policy
from django_workflows.serialization import NotJournalable, encode
from django_workflows.step_functions import StepFunction, wants_context
from django_workflows.store.journal import Entry, encoded
from django_workflows.timeouts import call_with_timeout
from django_workflows.validation import validate_step_name

_ZERO = timedelta(0)
# What fails a step at once, whatever retries its policy has left.
_NOT_RETRIED = (NonRetryableError, StepResultError, SystemExit, KeyboardInterrupt)


class WorkflowStep:
    """The ``step`` argument of ``run(event, step)``."""

    __slots__ = ("_replay", "_declared", "_declared_steps")

    def __init__(self, replay: JournaledSteps):
        self._replay = replay
        # The step functions run() declared with the decorator forms, by function name: a later step
        # function's parameter of that name receives that step's result.
        self._declared: dict[str, StepFunction] = {}
        self._declared_steps: dict[str, StepFunction] = {}

    def do(self, name: str | None = None, fn: Callable[..., Any] | None = None, *,
           config: dict[str, Any] | None = None, depends: Sequence[StepFunction] | None = None,
           concurrent: bool = False, atomic: bool = False) -> Any:
        """Run ``fn`` as a durable step named ``name``; or, without ``fn``, declare the decorated
        function as a step (``@step.do()`` names it after the function, ``@step.do("charge",
        depends=[reserve])`` runs ``reserve`` first and passes its result in), which its call runs.

        A function with a ``ctx`` parameter receives the step context (``StepContext``). ``config``
        may name an undo: ``{"rollback": fn, "rollback_config": {...}}`` (see ``rollback_all``).
        ``atomic=True`` (or ``config={"atomic": True}``) runs ``fn`` in a transaction of the workflow
        database that commits its journal row too: exactly once (``django_workflows.atomic_steps``)."""
        if atomic:
            config = {**(config or {}), "atomic": True}
        if fn is None:
            if name is not None:
                validate_step_name(name)
            return lambda func: self._declare(name, func, config, depends, concurrent)
        if depends or concurrent:
            raise InvalidStepInput(f"step.do({name!r}): depends and concurrent belong to the decorator form, "
                                   "@step.do(name, depends=[...])")
        return self._run_do(name, fn, config)

    def with_rollback(self, name: str | None = None, config: dict[str, Any] | None = None, *,
                      depends: Sequence[StepFunction] | None = None, concurrent: bool = False,
                      undo: Callable[..., Any] | None = None) -> Callable[[Callable[..., Any]], StepFunction]:
        """Declare a step with an undo (the Python SDK's form): ``@step.with_rollback("charge")``, then
        ``@charge.undo`` (or ``@charge.undo(config={...})``) on the function that undoes it, or the undo
        given at once, ``undo=refund``. ``depends`` and ``concurrent`` are those of ``step.do``. Calling
        the step before it has an undo raises ``ValueError``."""
        if name is not None:
            validate_step_name(name)

        def declare(func):
            declared = self._declare(name, func, config, depends, concurrent)
            declared.requires_undo = True
            if undo is not None:
                declared.undo(undo)
            return declared

        return declare

    def rollback_all(self, error: BaseException | None = None, *, continue_on_error: bool = False) -> list[str]:
        """Run the undos of every step that succeeded with one, last first, each as a durable step;
        ``error`` is what their handlers receive as ``error``; return the names of the steps undone. A
        failed ``run()`` calls it by itself. The first undo that fails for good stops the rollback and
        is raised here; with ``continue_on_error=True`` the others run, and the failures are raised at
        the end as an ``ExceptionGroup``. Called from an undo, it raises ``RuntimeError``."""
        return self._replay.call(self._replay.rollback_all, error, continue_on_error)

    def all(self, calls: Sequence[Sequence[Any]]) -> list[Any]:
        """Run ``step.do`` calls side by side (``[(name, fn), (name, fn, config), ...]``) and return their
        results in that order: ``Promise.all``. See ``django_workflows.concurrent_steps``."""
        return self._replay.call(self._replay.all_steps, calls)

    def sleep(self, name: str, duration: int | float | str | timedelta) -> None:
        """Wait ``duration`` (milliseconds, or "N unit(s)"), holding no worker."""
        self._replay.call(self._replay.sleep, name, duration=duration)

    def sleep_until(self, name: str, timestamp: datetime | int | float) -> None:
        """Wait until ``timestamp`` (an aware datetime, or epoch seconds), holding no worker."""
        self._replay.call(self._replay.sleep, name, until=timestamp)

    def wait_for_event(self, name: str, type: str | Sequence[str],  # noqa: A002
                       timeout: int | float | str | timedelta = "24 hours") -> WorkflowStepEvent:
        """Wait for an event of ``type`` (or of any type in a list), up to ``timeout``."""
        return self._replay.call(self._replay.wait_for_event, name, type, timeout)

    def child(self, name: str, workflow: str, params: Any = None, id: str | None = None,  # noqa: A002
              on_parent_end: str = "terminate") -> Any:
        """Start an instance of ``workflow`` as this instance's child, and wait for its end: return its
        output, or raise its error here with its class (``InstanceTerminated`` if it was terminated).

        Two journaled steps: ``name`` creates the child (at most once, with ``id``, or an id derived from
        this instance's and the step's), ``"<key> (result)"`` waits for its end, holding no worker.
        ``on_parent_end``: what this instance's terminate, terminate(rollback=True) or restart does to
        the child while it runs: ``"terminate"`` (the same to the child) or ``"abandon"`` (nothing)."""
        create = self._replay.child_creator(name, workflow, params, id, on_parent_end)
        created = self._replay.call(self._replay.do, name, create, None)
        return self._replay.call(self._replay.wait_for_child, children.wait_name(created), created)

    def patched(self, change_id: str) -> bool:
        """Whether this instance runs the code that the change ``change_id`` guards: True on new
        instances and on those that had not reached this point when the change was deployed, False on
        those that had passed it on the code before. The answer is journaled (a marker, not a step), so
        every replay gets the same one. Not awaited, in ``async def run`` either. See
        ``django_workflows.patches``."""
        return self._replay.call(self._replay.patched, change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """The patch ``change_id`` is in every instance still running: the code takes the new path
        without asking, and this keeps its marker journaled for new instances, which a worker still
        running code with ``step.patched(change_id)`` (a rolling deploy) needs to take the new path too.
        Once no such worker is left, remove the call: the markers journaled are then passed over."""
        self._replay.call(self._replay.patched, change_id, deprecated=True)

    step_function_class = StepFunction

    def _run_do(self, name, fn, config):
        return self._replay.call(self._replay.do, name, fn, config)

    def _declare(self, name, func, config, depends, concurrent) -> StepFunction:
        if name is None:
            name = getattr(func, "__name__", None)
            if not name or name == "<lambda>":
                raise InvalidStepInput("@step.do() names the step after its function, and a lambda has no "
                                       "name: write @step.do('name')")
            validate_step_name(name)
        declared = self.step_function_class(self, name, func, config, depends, concurrent)
        self._declared[getattr(func, "__name__", name)] = declared
        # Cloudflare's SDK resolves a parameter by step name: the latest step of that name.
        self._declared_steps[name] = declared
        return declared


@dataclass(frozen=True)
class PendingDo:
    """A ``step.do`` the journal does not answer: what running and journaling it needs."""

    name: str
    key: str
    entry: Entry | None
    fn: Callable[..., Any]
    config: dict[str, Any] | None
    policy: StepPolicy
    undo: Callable[..., Any] | None
    undo_config: dict[str, Any] | None


class Attempt(NamedTuple):
    """What one attempt of a step's body came to, and what it cost."""

    started: datetime
    ended: datetime
    text: str | None
    """The result as journal JSON (None when it failed)."""
    value: object
    failure: BaseException | None
    cpu: float
    """Seconds of CPU time the body used, in the thread that ran it."""
    wall: float
    """Seconds the body took, end to end."""
    thread: int | None
    """The thread that ran the body (``threading.get_ident()``)."""
    trace: tuple[Any, int] | None = None
    """The attempt's span and when its body ended (``time.time_ns()``), with OpenTelemetry on; ended by
    ``run_do`` once the attempt's outcome (retried or not) is known."""

    def journaled(self, number: int) -> dict[str, Any]:
        """The attempt as ``Step.attempts`` keeps it (an error is added by the caller)."""
        return {"attempt": number, "start": _iso(self.started), "end": _iso(self.ended),
                "success": self.failure is None, "cpu_ms": _ms(self.cpu), "wall_ms": _ms(self.wall)}


class _Meter:
    """Measures a step's body in the thread that runs it: CPU time with ``time.thread_time()``, which
    counts this thread's CPU only, so waiting on I/O, sleeping or a lock is not counted, nor other
    threads' work."""

    __slots__ = ("cpu", "wall", "thread")

    def __init__(self):
        self.cpu = self.wall = 0.0
        self.thread: int | None = None

    def run(self, body):
        self.thread = threading.get_ident()
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return _to_the_end(body)
        finally:
            self.cpu, self.wall = time.thread_time() - cpu, time.perf_counter() - wall


class JournaledSteps(rollbacks.UndoSteps, waits.WaitSteps, patches.PatchSteps, concurrent_steps.ConcurrentSteps,
                     children.ChildSteps):
    """The replay's side of each step call: answered from the journal, or run and journaled.

    ``Replay`` is made of it, and keeps what these methods share: the journal, its writer, and the
    bookkeeping of every step (``next_key``, ``lookup``, ``count_step``, ``after_write``).
    """

    def call(self, method, *args, **kwargs):
        """Call a step (``do``, ``sleep``, ``wait_for_event``), remembering a suspension it asks for."""
        if self.writer.fenced:
            # The lease was lost and run() swallowed the Fenced: it stops here, as at a suspension.
            raise self.writer.fence()
        if self.suspended is not None:
            raise self.suspended
        try:
            return method(*args, **kwargs)
        except Suspend as suspension:
            self.suspended = suspension
            raise

    # step.do

    def do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None) -> object:
        answered, outcome = self.begin_do(name, fn, config)
        return outcome if answered else self.run_do(outcome)

    def begin_do(self, name: str, fn: Any, config: dict[str, Any] | None,
                 key: str | None = None) -> tuple[bool, Any]:
        """Take the step's key (unless an async run() took it when it called the step) and look it up:
        ``(True, result)`` if the journal answers it (its error raised again if it failed),
        ``(False, PendingDo)`` if it must run now; a retry whose delay has not passed suspends."""
        undo = undo_config = None
        if config is not None and any(k in config for k in rollbacks.ROLLBACK_KEYS):
            config, undo, undo_config = rollbacks.split_config(config, f"step {name!r}")
        key = key or self.next_key(name)
        entry = self.lookup(key, StepKind.DO)
        if entry is not None and entry.status == StepStatus.SUCCEEDED:
            self.count_step(key, journaled=True)
            if undo is not None:
                policy = default_policy() if config is None else build_policy(
                    config, workflow_settings.DEFAULT_STEP_CONFIG, f"step {name!r}")
                self._remember_undo(name, key, undo, undo_config, entry.result, policy, len(entry.attempts))
            return True, entry.result
        if entry is not None and entry.status == StepStatus.FAILED:
            self.count_step(key, journaled=True)
            assert entry.error is not None  # a failed step's row has its error
            raise rebuild_error(entry.error)
        self.count_step(key, journaled=entry is not None)
        if not callable(fn):
            raise InvalidStepInput(f"step.do({name!r}, fn): fn must be callable, got {type(fn).__name__}")
        policy = default_policy() if config is None else build_policy(
            config, workflow_settings.DEFAULT_STEP_CONFIG, f"step {name!r}")
        if entry is not None and entry.wake_at is not None:
            if entry.wake_at > clock.now():
                raise Suspend(step_key=key, wake_at=entry.wake_at, reason="retry")
            self.report.timer_fired(key, name, "retry", entry.wake_at, self.started_at)
        return False, PendingDo(name, key, entry, fn, config, policy, undo, undo_config)

    def attempt(self, pending: PendingDo, number: int, journal: Any = None, callers: Any = None) -> Attempt:
        """Run attempt ``number`` of a pending step's body under its timeout. Nothing else runs between
        arming the timeout and disarming it, and an interrupted attempt's connections are discarded
        before it returns: the journal writes after it never meet a connection the interruption left
        mid-transaction. The body's CPU and wall time are measured in whichever thread runs it."""
        started = clock.now()
        failure: BaseException | None
        text = value = failure = None
        body = pending.fn
        if wants_context(body):
            body = functools.partial(body, ctx=self._context(pending.name, pending.key, number, pending.policy))
        meter = _Meter()
        span = None if self.span is None else telemetry.start_attempt(self.span, self.instance, pending.key,
                                                                      pending.name, number)
        lease = self.writer.lease
        running = None if lease is None else lease.body_started(connections[self.writer.alias],
                                                                pending.policy.timeout.total_seconds())
        try:
            if span is None:
                returned = call_with_timeout(functools.partial(meter.run, body),
                                             pending.policy.timeout.total_seconds(), journal, callers)
            else:
                # The body's own spans (its queries, its HTTP calls) are the attempt's children.
                returned = telemetry.run_in_span(span, call_with_timeout, functools.partial(meter.run, body),
                                                 pending.policy.timeout.total_seconds(), journal, callers)
            text, value = encode(returned, self.result_limit)
        except AttemptTimedOut:
            failure = StepTimeoutError(
                f"Step {pending.name!r}: attempt {number} ran past its timeout of {pending.policy.timeout}",
                step=pending.key, attempt=number,
            )
        except NotJournalable as exc:
            failure = StepResultError(f"Step {pending.name!r} returned a value that {exc}", step=pending.key)
        except USER_FAILURES as exc:
            failure = exc
        finally:
            if lease is not None and running is not None:
                lease.body_ended(running)
        return Attempt(started, clock.now(), text, value, failure, meter.cpu, meter.wall, meter.thread,
                       None if span is None else (span, time.time_ns()))

    def run_do(self, pending: PendingDo, first: Attempt | None = None) -> object:
        """Run the pending step's attempts and journal them; ``first`` is an attempt already run (by
        ``step.all``), journaled as this replay's first."""
        name, key, entry, policy = pending.name, pending.key, pending.entry, pending.policy
        attempts = list(entry.attempts) if entry is not None else []
        outcome: Attempt
        while True:
            # A lease that lapsed or was lost may be another worker's now: its replay runs this body.
            self.writer.check_lease()
            number = len(attempts) + 1
            status = None
            if first is None:
                self.running_step = key
                try:
                    if policy.atomic:
                        # The body and, if it succeeds, its journal row commit together or not at all.
                        def journal(outcome):
                            return self.journal_success(pending, [*attempts, outcome.journaled(number)], outcome)

                        outcome, status = atomic_steps.attempt_and_journal(self, pending, number, journal)
                    else:
                        outcome = self.attempt(pending, number, self.writer.connection)
                finally:
                    self.running_step = None
                self.count_cost(outcome)
            else:
                outcome, first = first, None
            started, ended, value, failure = outcome.started, outcome.ended, outcome.value, outcome.failure
            retrying = (failure is not None and number < policy.max_attempts
                        and not isinstance(failure, _NOT_RETRIED))
            if outcome.trace is not None:
                telemetry.end_attempt(*outcome.trace, "succeeded" if failure is None else
                                      "retrying" if retrying else "failed", failure)
            if self.fatal is not None:
                raise self.fatal
            attempt = outcome.journaled(number)
            if failure is None:
                attempts.append(attempt)
                if status is None:
                    status = self.journal_success(pending, attempts, outcome)
                self.report.step_succeeded(key, name, StepKind.DO, number, value, policy.sensitive == "output")
                if pending.undo is not None:
                    self._remember_undo(name, key, pending.undo, pending.undo_config, value, policy, number)
                self.after_write(status, key)
                return value

            error = describe_error(failure)
            attempt["error"] = {"name": error["name"], "message": error["message"]}
            attempts.append(attempt)
            if retrying:
                delay = policy.delay_after(number)
                if delay <= _ZERO:
                    # The next attempt would begin at once: a step boundary, where the CPU time limit
                    # applies. Past it, the attempts that ran are journaled before the replay stops.
                    exceeded = self.cpu_time_exceeded(key)
                    if exceeded is None:
                        self.report.step_retrying(key, name, number, failure, None)
                        continue
                    self._write_attempts(entry, key, name, policy, attempts, started,
                                         status=StepStatus.RETRYING, error=error, wake_at=ended)
                    self.fail_fatally(exceeded)
                wake_at = ended + delay
                self._write_attempts(entry, key, name, policy, attempts, started,
                                     status=StepStatus.RETRYING, error=error, wake_at=wake_at)
                self.report.step_retrying(key, name, number, failure, wake_at)
                raise Suspend(step_key=key, wake_at=wake_at, reason="retry")
            status = self._write_attempts(entry, key, name, policy, attempts, started,
                                          status=StepStatus.FAILED, error=error, ended_at=ended)
            self.report.step_failed(key, name, StepKind.DO, number, failure)
            rebuilt = rebuild_error(error)
            if status == InstanceStatus.WAITING_FOR_PAUSE:
                raise Suspend(pause=True, step_key=key)
            raise rebuilt from failure

    def journal_success(self, pending: PendingDo, attempts: list[dict[str, Any]], outcome: Attempt) -> str:
        """Journal the step as succeeded with ``attempts``, the last ``outcome``; return the instance's
        status."""
        assert outcome.text is not None  # a succeeded attempt's result, encoded
        if pending.entry is None:
            _, status = self.writer.insert(
                key=pending.key, name=pending.name, kind=StepKind.DO, status=StepStatus.SUCCEEDED,
                attempts=attempts, config=encoded(pending.policy.config_json), result=encoded(outcome.text),
                started_at=outcome.started, ended_at=outcome.ended,
            )
        else:
            _, status = self.writer.update(
                pending.entry.id, status=StepStatus.SUCCEEDED, attempts=attempts, result=encoded(outcome.text),
                error=None, wake_at=None, ended_at=outcome.ended,
            )
        return status

    def _write_attempts(self, entry, key, name, policy, attempts, started, **fields) -> str:
        if entry is None:
            step_id, status = self.writer.insert(
                key=key, name=name, kind=StepKind.DO, attempts=attempts, config=encoded(policy.config_json),
                started_at=started, **fields,
            )
            # Later attempts in this replay update the row just written.
            self.journal[key] = Entry(step_id, StepKind.DO, fields["status"], attempts, None,
                                      fields.get("error"), fields.get("wake_at"), started)
        else:
            _, status = self.writer.update(entry.id, attempts=attempts, **fields)
        return status


def _to_the_end(body):
    """Call a step's body; an ``async def`` body's coroutine runs to its end in an event loop of its own."""
    returned = body()
    if inspect.iscoroutine(returned):
        return asyncio.run(returned)
    return returned


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def _ms(seconds: float) -> float:
    # To the microsecond: most steps take well under a millisecond of CPU.
    return round(seconds * 1000, 3)
