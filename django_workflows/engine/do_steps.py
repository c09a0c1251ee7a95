"""What ``step.do`` does on the replay: answered from the journal, or run and journaled.

A step found succeeded in the journal returns its result without running again; found failed for good,
its error is raised again. Otherwise its body runs under its timeout, attempt after attempt as its
retries allow, and each outcome is journaled: the success (in the body's own transaction for an
``atomic`` step, ``atomic_steps``), or the attempts so far with the wait before the next (a retry's
delay suspends the replay), or the failure for good. ``step.all`` runs the first attempts of several
pending steps side by side and journals each here (``concurrent_steps``).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import types
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connections

from django_workflows.shared import clock, large_values, telemetry
from django_workflows.shared.declared_types import DeclaredTypeMismatch, convert

from django_workflows.engine import atomic_steps, result_types, rollbacks
from django_workflows.foundations.conf import workflow_settings
from django_workflows.foundations.control_flow import AttemptTimedOut, Suspend
from django_workflows.shared.error_journal import USER_FAILURES, describe_error, rebuild_error
from django_workflows.errors import InvalidStepInput, NonRetryableError, StepResultError, StepTimeoutError
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.models import InstanceStatus, StepKind, StepStatus
from django_workflows.engine.policy import StepPolicy, build_policy, default_policy
from django_workflows.shared.serialization import NotJournalable, encode
from django_workflows.engine.read_back import read_back
from django_workflows.engine.step_functions import wants_context
from django_workflows.engine.step_host import Attempt, PendingDo, StepHost
from django_workflows.store.journal import Entry, encoded
from django_workflows.engine.timeouts import call_with_timeout

_ZERO = timedelta(0)
# What fails a step at once, whatever retries its policy has left.
_NOT_RETRIED = (NonRetryableError, StepResultError, SystemExit, KeyboardInterrupt)


class _Meter:
    """Measures a step's body in the thread that runs it: CPU time with ``time.thread_time()``, which
    counts this thread's CPU only, so waiting on I/O, sleeping or a lock is not counted, nor other
    threads' work."""

    __slots__ = ("cpu", "wall", "thread")

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.thread: int | None = None

    def run(self, body: Callable[[], Any]) -> Any:
        self.thread = threading.get_ident()
        # The wall clock is read outside the CPU clock at both ends, and the CPU figure is capped at the
        # wall's: a thread cannot use more CPU than the time that passed, but the two are different
        # clocks, and on a virtual machine the CPU clock can run ahead of the wall by microseconds.
        wall = time.perf_counter()
        cpu = time.thread_time()
        try:
            returned = body()
            # An async def body's coroutine runs to its end in an event loop of its own (the type check is
            # inspect.iscoroutine without its call).
            if isinstance(returned, types.CoroutineType):
                return asyncio.run(returned)
            return returned
        finally:
            cpu = time.thread_time() - cpu
            self.wall = wall = time.perf_counter() - wall
            self.cpu = cpu if cpu < wall else wall


class DoSteps:
    """The replay's side of ``step.do``. Given the host (whose span, if it records, is each attempt's
    parent), the cursor (a row written for a new step is noted there), the undos (a step that succeeds
    with one is remembered) and the largest result a step may journal."""

    __slots__ = ("host", "cursor", "undos", "result_limit")

    def __init__(self, host: StepHost, cursor: JournalCursor, undos: rollbacks.UndoSteps, result_limit: int):
        self.host, self.cursor, self.undos = host, cursor, undos
        self.result_limit = result_limit

    def do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None) -> object:
        answered, outcome = self.begin_do(name, fn, config)
        return outcome if answered else self.run_do(outcome, later=self.host.rows.watching())

    def begin_do(self, name: str, fn: Any, config: dict[str, Any] | None,
                 key: str | None = None) -> tuple[bool, Any]:
        """Take the step's key (unless an async run() took it when it called the step) and look it up:
        ``(True, result)`` if the journal answers it (its error raised again if it failed),
        ``(False, PendingDo)`` if it must run now; a retry whose delay has not passed suspends."""
        host = self.host
        undo = undo_config = None
        config, declared = result_types.split_config(name, fn, config)
        if config is not None and any(k in config for k in rollbacks.ROLLBACK_KEYS):
            config, undo, undo_config = rollbacks.split_config(config, f"step {name!r}")
        key = key or host.next_key(name)
        entry = host.lookup(key, StepKind.DO)
        if entry is not None and entry.status == StepStatus.SUCCEEDED:
            host.count_step(key, journaled=True)
            result = read_back(entry.result, entry.typed, lambda: f"instance {host.instance}, step {key!r}")
            if declared is not None:
                result = result_types.journaled_as(result, declared, name, key)
            if undo is not None:
                self.undos.remember(name, key, undo, undo_config, result, _policy(name, config),
                                    len(entry.attempts))
            return True, result
        if entry is not None and entry.status == StepStatus.FAILED:
            host.count_step(key, journaled=True)
            assert entry.error is not None  # a failed step's row has its error
            raise rebuild_error(entry.error)
        host.count_step(key, journaled=entry is not None)
        if not callable(fn):
            raise InvalidStepInput(f"step.do({name!r}, fn): fn must be callable, got {type(fn).__name__}")
        policy = _policy(name, config)
        if entry is not None and entry.wake_at is not None:
            if entry.wake_at > clock.now():
                raise Suspend(step_key=key, wake_at=entry.wake_at, reason="retry")
            host.report.timer_fired(key, name, "retry", entry.wake_at, host.started_at)
        return False, PendingDo(name, key, entry, fn, config, policy, undo, undo_config, declared)

    def attempt(self, pending: PendingDo, number: int, journal: Any = None, callers: Any = None) -> Attempt:
        """Run attempt ``number`` of a pending step's body under its timeout. Nothing else runs between
        arming the timeout and disarming it, and an interrupted attempt's connections are discarded
        before it returns: the journal writes after it never meet a connection the interruption left
        mid-transaction. The body's CPU and wall time are measured in whichever thread runs it."""
        host = self.host
        started = clock.now()
        failure: BaseException | None
        text = value = failure = None
        body = pending.fn
        if wants_context(body):
            body = functools.partial(body, ctx=rollbacks.step_context(pending.name, pending.key, number,
                                                                      pending.policy))
        meter = _Meter()
        span = None if host.span is None else telemetry.start_attempt(host.span, host.instance, pending.key,
                                                                      pending.name, number)
        writer = host.writer
        lease = writer.lease
        timeout = pending.policy.timeout.total_seconds()
        # ``journal`` is the replay thread's own connection, passed by the callers that run the body in
        # that thread; a body run elsewhere (step.all) is noted with that thread's connection.
        running = None if lease is None else lease.body_started(
            journal if journal is not None else connections[writer.alias], timeout)
        try:
            if span is None:
                returned = call_with_timeout(functools.partial(meter.run, body), timeout, journal, callers)
            else:
                # The body's own spans (its queries, its HTTP calls) are the attempt's children.
                returned = telemetry.run_in_span(span, call_with_timeout, functools.partial(meter.run, body),
                                                 timeout, journal, callers)
            text, value = encode(returned, self.result_limit)
            if pending.result_type is not None:
                # Made into the declared type from the value a replay reads back, so both runs see alike.
                value = convert(value, pending.result_type)
            text = large_values.offload(text, host.instance.pk)
        except AttemptTimedOut:
            failure = StepTimeoutError(
                f"Step {pending.name!r}: attempt {number} ran past its timeout of {pending.policy.timeout}",
                step=pending.key, attempt=number,
            )
        except NotJournalable as exc:
            failure = StepResultError(f"Step {pending.name!r} returned a value that {exc}", step=pending.key)
        except DeclaredTypeMismatch as exc:
            failure = result_types.mismatch(exc, pending.result_type, pending.name, pending.key)
        except USER_FAILURES as exc:
            failure = exc
        finally:
            if lease is not None and running is not None:
                lease.body_ended(running)
        return Attempt(started, clock.now(), text, value, failure, meter.cpu, meter.wall, meter.thread,
                       None if span is None else (span, time.time_ns()))

    def run_do(self, pending: PendingDo, first: Attempt | None = None, later: bool = False) -> object:
        """Run the pending step's attempts and journal them; ``first`` is an attempt already run (by
        ``step.all``), journaled as this replay's first. ``later``: a success journaled in a row of its
        own is written with the replay's next write (``JournalWriter.insert_later``): a sync run() that
        returns after it commits it with its end."""
        host, writer = self.host, self.host.writer
        name, key, entry, policy = pending.name, pending.key, pending.entry, pending.policy
        attempts = list(entry.attempts) if entry is not None else []
        outcome: Attempt
        while True:
            # A lease that lapsed or was lost may be another worker's now: its replay runs this body.
            writer.check_lease()
            number = len(attempts) + 1
            status = None
            if first is None:
                host.running_step = key
                try:
                    if policy.atomic:
                        # The body and, if it succeeds, its journal row commit together or not at all.
                        def journal(outcome: Attempt) -> str:
                            return self.journal_success(pending, [*attempts, outcome.journaled(number)], outcome)

                        outcome, status = atomic_steps.attempt_and_journal(host, self.attempt, pending, number,
                                                                           journal)
                    else:
                        outcome = self.attempt(pending, number, writer.connection)
                finally:
                    host.running_step = None
                host.count_cost(outcome)
            else:
                outcome, first = first, None
            started, ended, value, failure = outcome.started, outcome.ended, outcome.value, outcome.failure
            retrying = (failure is not None and number < policy.max_attempts
                        and not isinstance(failure, _NOT_RETRIED))
            if outcome.trace is not None:
                telemetry.end_attempt(*outcome.trace, "succeeded" if failure is None else
                                      "retrying" if retrying else "failed", failure)
            if host.fatal is not None:
                raise host.fatal
            attempt = outcome.journaled(number)
            if failure is None:
                attempts.append(attempt)
                succeeded = functools.partial(host.report.step_succeeded, key, name, StepKind.DO, number, value,
                                              policy.sensitive == "output")
                if status is None and later and entry is None:
                    # The instance's status (a pause asked meanwhile) is read by that next write.
                    self._journal_later(pending, attempts, outcome, succeeded)
                    status = InstanceStatus.RUNNING
                else:
                    if status is None:
                        status = self.journal_success(pending, attempts, outcome)
                    succeeded()
                if pending.undo is not None:
                    self.undos.remember(name, key, pending.undo, pending.undo_config, value, policy, number)
                host.after_write(status, key)
                return value

            error = describe_error(failure)
            attempt["error"] = {"name": error["name"], "message": error["message"]}
            attempts.append(attempt)
            if retrying:
                delay = policy.delay_after(number)
                if delay <= _ZERO:
                    # The next attempt would begin at once: a step boundary, where the CPU time limit
                    # applies. Past it, the attempts that ran are journaled before the replay stops.
                    exceeded = host.cpu_time_exceeded(key)
                    if exceeded is None:
                        host.report.step_retrying(key, name, number, failure, None)
                        continue
                    self._write_attempts(pending, attempts, started, status=StepStatus.RETRYING, error=error,
                                         wake_at=ended)
                    host.fail_fatally(exceeded)
                wake_at = ended + delay
                self._write_attempts(pending, attempts, started, status=StepStatus.RETRYING, error=error,
                                     wake_at=wake_at)
                host.report.step_retrying(key, name, number, failure, wake_at)
                raise Suspend(step_key=key, wake_at=wake_at, reason="retry")
            status = self._write_attempts(pending, attempts, started, status=StepStatus.FAILED, error=error,
                                          ended_at=ended)
            host.report.step_failed(key, name, StepKind.DO, number, failure)
            rebuilt = rebuild_error(error)
            if status == InstanceStatus.WAITING_FOR_PAUSE:
                raise Suspend(pause=True, step_key=key)
            raise rebuilt from failure

    def journal_success(self, pending: PendingDo, attempts: list[dict[str, Any]], outcome: Attempt) -> str:
        """Journal the step as succeeded with ``attempts``, the last ``outcome``; return the instance's
        status."""
        assert outcome.text is not None  # a succeeded attempt's result, encoded
        writer = self.host.writer
        if pending.entry is None:
            _, status = writer.insert(
                key=pending.key, name=pending.name, kind=StepKind.DO, status=StepStatus.SUCCEEDED,
                attempts=attempts, config=encoded(pending.policy.config_json), result=encoded(outcome.text),
                started_at=outcome.started, ended_at=outcome.ended,
            )
        else:
            _, status = writer.update(
                pending.entry.id, status=StepStatus.SUCCEEDED, attempts=attempts, result=encoded(outcome.text),
                error=None, wake_at=None, ended_at=outcome.ended,
            )
        return status

    def _journal_later(self, pending: PendingDo, attempts: list[dict[str, Any]], outcome: Attempt,
                       succeeded: Callable[[], None]) -> None:
        assert outcome.text is not None  # a succeeded attempt's result, encoded
        self.host.writer.insert_later(
            succeeded, key=pending.key, name=pending.name, kind=StepKind.DO,
            status=StepStatus.SUCCEEDED, attempts=attempts, config=encoded(pending.policy.config_json),
            result=encoded(outcome.text), started_at=outcome.started, ended_at=outcome.ended,
        )

    def _write_attempts(self, pending: PendingDo, attempts: list[dict[str, Any]], started: Any,
                        **fields: Any) -> str:
        writer, entry, key = self.host.writer, pending.entry, pending.key
        if entry is None:
            step_id, status = writer.insert(
                key=key, name=pending.name, kind=StepKind.DO, attempts=attempts,
                config=encoded(pending.policy.config_json), started_at=started, **fields,
            )
            # Later attempts in this replay update the row just written.
            self.cursor.note(key, Entry(step_id, StepKind.DO, fields["status"], attempts, None,
                                        fields.get("error"), fields.get("wake_at"), started))
        else:
            _, status = writer.update(entry.id, attempts=attempts, **fields)
        return status


def _policy(name: str, config: dict[str, Any] | None) -> StepPolicy:
    return default_policy() if config is None else build_policy(
        config, workflow_settings.DEFAULT_STEP_CONFIG, f"step {name!r}")
