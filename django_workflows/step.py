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
from datetime import UTC, datetime, timedelta

from django_workflows import clock, rollbacks
from django_workflows.conf import workflow_settings
from django_workflows.control_flow import AttemptTimedOut, Suspend
from django_workflows.definition import WorkflowStepEvent
from django_workflows.durations import parse_duration
from django_workflows.error_journal import USER_FAILURES, describe_error, rebuild_error
from django_workflows.errors import (
    InvalidEvent,
    InvalidStepInput,
    NonRetryableError,
    StepResultError,
    StepTimeoutError,
    WorkflowConfigError,
    WorkflowTimeoutError,
)
from django_workflows.models import InstanceStatus, StepKind, StepStatus
from django_workflows.policy import build_policy, default_policy
from django_workflows.serialization import NotJournalable, encode
from django_workflows.step_functions import StepFunction, wants_context
from django_workflows.store.journal import Entry, encoded
from django_workflows.timeouts import call_with_timeout
from django_workflows.validation import validate_event_type, validate_step_name

MAX_WAIT = timedelta(days=365)

_ZERO = timedelta(0)


class WorkflowStep:
    """The ``step`` argument of ``run(event, step)``."""

    __slots__ = ("_replay", "_declared")

    def __init__(self, replay: JournaledSteps):
        self._replay = replay
        # The step functions run() declared with the decorator forms, by function name: a later step
        # function's parameter of that name receives that step's result.
        self._declared: dict[str, StepFunction] = {}

    def do(self, name: str | None = None, fn=None, *, config: dict | None = None, depends=None,
           concurrent: bool = False):
        """Run ``fn`` as a durable step named ``name``; or, without ``fn``, declare the decorated
        function as a step (``@step.do()`` names it after the function, ``@step.do("charge",
        depends=[reserve])`` runs ``reserve`` first and passes its result in), which its call runs.

        A function with a ``ctx`` parameter receives the step context (``StepContext``). ``config``
        may name an undo: ``{"rollback": fn, "rollback_config": {...}}`` (see ``rollback_all``)."""
        if fn is None:
            if name is not None:
                validate_step_name(name)
            return lambda func: self._declare(name, func, config, depends, concurrent)
        if depends or concurrent:
            raise InvalidStepInput(f"step.do({name!r}): depends and concurrent belong to the decorator form, "
                                   "@step.do(name, depends=[...])")
        return self._run_do(name, fn, config)

    def with_rollback(self, name: str | None = None, *, config: dict | None = None, depends=None):
        """Declare a step with an undo (the Python SDK's form): ``@step.with_rollback("charge")``, then
        ``@charge.undo`` on the function that undoes it."""
        if name is not None:
            validate_step_name(name)
        return lambda func: self._declare(name, func, config, depends, False)

    def rollback_all(self, error: BaseException | None = None) -> list[str]:
        """Run the undos of every step that succeeded with one, last first, each as a durable step;
        ``error`` is what their handlers receive as ``error``; return the names of the steps undone. A
        failed ``run()`` calls it by itself."""
        return self._replay.call(self._replay.rollback_all, error)

    def sleep(self, name: str, duration) -> None:
        """Wait ``duration`` (milliseconds, or "N unit(s)"), holding no worker."""
        self._replay.call(self._replay.sleep, name, duration=duration)

    def sleep_until(self, name: str, timestamp) -> None:
        """Wait until ``timestamp`` (an aware datetime, or epoch seconds), holding no worker."""
        self._replay.call(self._replay.sleep, name, until=timestamp)

    def wait_for_event(self, name: str, type, timeout="24 hours") -> WorkflowStepEvent:  # noqa: A002
        """Wait for an event of ``type`` (or of any type in a list), up to ``timeout``."""
        return self._replay.call(self._replay.wait_for_event, name, type, timeout)

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
        return declared


class JournaledSteps(rollbacks.UndoSteps):
    """The replay's side of each step call: answered from the journal, or run and journaled.

    ``Replay`` is made of it, and keeps what these methods share: the journal, its writer, and the
    bookkeeping of every step (``next_key``, ``lookup``, ``count_step``, ``after_write``).
    """

    def call(self, method, *args, **kwargs):
        """Call a step (``do``, ``sleep``, ``wait_for_event``), remembering a suspension it asks for."""
        if self.suspended is not None:
            raise self.suspended
        try:
            return method(*args, **kwargs)
        except Suspend as suspension:
            self.suspended = suspension
            raise

    # step.do

    def do(self, name: str, fn, config) -> object:
        undo = undo_config = None
        if config is not None and any(k in config for k in rollbacks.ROLLBACK_KEYS):
            config, undo, undo_config = rollbacks.split_config(config, f"step {name!r}")
        key = self.next_key(name)
        entry = self.lookup(key, StepKind.DO)
        if entry is not None and entry.status == StepStatus.SUCCEEDED:
            self.count_step(key, journaled=True)
            if undo is not None:
                self._remember_undo(name, undo, undo_config, entry.result, config, len(entry.attempts))
            return entry.result
        if entry is not None and entry.status == StepStatus.FAILED:
            self.count_step(key, journaled=True)
            raise rebuild_error(entry.error)
        self.count_step(key, journaled=entry is not None)
        if not callable(fn):
            raise InvalidStepInput(f"step.do({name!r}, fn): fn must be callable, got {type(fn).__name__}")
        policy = default_policy() if config is None else build_policy(
            config, workflow_settings.DEFAULT_STEP_CONFIG, f"step {name!r}")
        if entry is not None and entry.wake_at is not None and entry.wake_at > clock.now():
            raise Suspend(step_key=key, wake_at=entry.wake_at)
        attempts = list(entry.attempts) if entry is not None else []
        timeout_seconds = policy.timeout.total_seconds()

        while True:
            # A lease that lapsed or was lost may be another worker's now: its replay runs this body.
            self.writer.check_lease()
            number = len(attempts) + 1
            started = clock.now()
            failure: BaseException | None = None
            self.running_step = key
            try:
                # Nothing else runs between arming the attempt's timeout and disarming it, and an
                # interrupted attempt's connections are discarded before it returns: the journal
                # writes below never meet a connection the interruption left mid-transaction.
                body = fn
                if wants_context(fn):
                    body = functools.partial(fn, ctx=self._context(name, number, policy))
                body = functools.partial(_to_the_end, body)
                returned = call_with_timeout(body, timeout_seconds, self.writer.connection)
                text, value = encode(returned, self.result_limit)
            except AttemptTimedOut:
                failure = StepTimeoutError(
                    f"Step {name!r}: attempt {number} ran past its timeout of {policy.timeout}",
                    step=key, attempt=number,
                )
            except NotJournalable as exc:
                failure = StepResultError(f"Step {name!r} returned a value that {exc}", step=key)
            except USER_FAILURES as exc:
                failure = exc
            finally:
                self.running_step = None
            if self.fatal is not None:
                raise self.fatal
            ended = clock.now()
            attempt = {"attempt": number, "start": _iso(started), "end": _iso(ended), "success": failure is None}
            if failure is None:
                attempts.append(attempt)
                if entry is None:
                    _, status = self.writer.insert(
                        key=key, name=name, kind=StepKind.DO, status=StepStatus.SUCCEEDED, attempts=attempts,
                        config=encoded(policy.config_json), result=encoded(text), started_at=started,
                        ended_at=ended,
                    )
                else:
                    _, status = self.writer.update(
                        entry.id, status=StepStatus.SUCCEEDED, attempts=attempts, result=encoded(text),
                        error=None, wake_at=None, ended_at=ended,
                    )
                if undo is not None:
                    self._remember_undo(name, undo, undo_config, value, config, number)
                self.after_write(status, key)
                return value

            error = describe_error(failure)
            attempt["error"] = {"name": error["name"], "message": error["message"]}
            attempts.append(attempt)
            retryable = not isinstance(failure, (NonRetryableError, StepResultError, SystemExit, KeyboardInterrupt))
            if retryable and number < policy.max_attempts:
                delay = policy.delay_after(number)
                if delay <= _ZERO:
                    continue
                wake_at = ended + delay
                self._write_attempts(entry, key, name, policy, attempts, started,
                                     status=StepStatus.RETRYING, error=error, wake_at=wake_at)
                raise Suspend(step_key=key, wake_at=wake_at)
            status = self._write_attempts(entry, key, name, policy, attempts, started,
                                          status=StepStatus.FAILED, error=error, ended_at=ended)
            rebuilt = rebuild_error(error)
            if status == InstanceStatus.WAITING_FOR_PAUSE:
                raise Suspend(pause=True, step_key=key)
            raise rebuilt from failure

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

    # step.sleep and step.sleep_until

    def sleep(self, name: str, *, duration=None, until=None) -> None:
        now = clock.now()
        if until is None:
            delta = parse_duration(duration, what=f"step.sleep({name!r})")
            if delta > MAX_WAIT:
                raise InvalidStepInput(f"step.sleep({name!r}): {duration!r} is longer than the limit of 365 days")
        key = self.next_key(name)
        entry = self.lookup(key, StepKind.SLEEP)
        if entry is not None:
            if entry.status == StepStatus.SUCCEEDED:
                return
            if entry.wake_at <= now:
                _, status = self.writer.update(entry.id, status=StepStatus.SUCCEEDED, ended_at=entry.wake_at)
                self.after_write(status, key)
                return
            raise Suspend(step_key=key, wake_at=entry.wake_at)
        if until is not None:
            wake_at = _as_wake_time(name, until)
            if wake_at < now:
                raise InvalidStepInput(
                    f"step.sleep_until({name!r}): {wake_at.isoformat()} is in the past (now is {now.isoformat()})"
                )
            if wake_at - now > MAX_WAIT:
                raise InvalidStepInput(f"step.sleep_until({name!r}): {wake_at.isoformat()} is more than 365 days away")
            delta = wake_at - now
        else:
            wake_at = now + delta
        config = {"duration": int(delta / timedelta(milliseconds=1))}
        if delta <= _ZERO:
            _, status = self.writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.SUCCEEDED,
                                           config=config, wake_at=wake_at, started_at=now, ended_at=now)
            self.after_write(status, key)
            return
        self.writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.WAITING, config=config,
                           wake_at=wake_at, started_at=now)
        raise Suspend(step_key=key, wake_at=wake_at)

    # step.wait_for_event

    def wait_for_event(self, name: str, event_type, timeout) -> WorkflowStepEvent:
        types = [event_type] if isinstance(event_type, str) else event_type
        if not isinstance(types, (list, tuple)) or not types:
            raise InvalidStepInput(
                f"step.wait_for_event({name!r}): type must be an event type or a non-empty list of them, "
                f"got {event_type!r}"
            )
        try:
            types = [validate_event_type(t) for t in types]
        except InvalidEvent as exc:
            raise InvalidStepInput(f"step.wait_for_event({name!r}): {exc}") from None
        delta = parse_duration(timeout, what=f"step.wait_for_event({name!r}) timeout")
        if delta > MAX_WAIT:
            raise InvalidStepInput(f"step.wait_for_event({name!r}): timeout {timeout!r} is longer than 365 days")
        key = self.next_key(name)
        # Not counted toward the step limit: as on Cloudflare, only step.do is.
        entry = self.lookup(key, StepKind.WAIT)
        undeclared = [t for t in types if self.declared_events is not None and t not in self.declared_events]
        if undeclared and entry is None:
            # Nobody could ever send it: the wait would only run out its timeout. A wait journaled
            # before its type left the declaration goes on as it began.
            self.fail_fatally(WorkflowConfigError(
                f"step.wait_for_event({name!r}) waits for {', '.join(map(repr, undeclared))}, which workflow "
                f"{self.instance.workflow_name!r} does not declare in its events; add it there, or "
                "wait for a declared type.",
                step=name,
            ))
        if entry is not None:
            if entry.status == StepStatus.SUCCEEDED:
                return _step_event(entry.result)
            if entry.status == StepStatus.FAILED:
                raise rebuild_error(entry.error)
            deadline = entry.wake_at
        else:
            deadline = clock.now() + delta
        received = self._consume(key, name, entry, types, deadline, delta)
        if received is not None:
            return received
        now = clock.now()
        if entry is None:
            self.writer.insert(key=key, name=name, kind=StepKind.WAIT, status=StepStatus.WAITING,
                               config={"type": types, "timeout": int(delta / timedelta(milliseconds=1))},
                               wake_at=deadline, started_at=now)
        elif deadline <= now:
            timeout_error = WorkflowTimeoutError(
                f"Step {name!r}: no event of type {' or '.join(map(repr, types))} arrived within "
                f"{entry_timeout(entry, delta)}",
                step=key, event_types=types,
            )
            error = describe_error(timeout_error)
            _, status = self.writer.update(entry.id, status=StepStatus.FAILED, error=error, ended_at=deadline)
            self.after_write(status, key)
            raise timeout_error
        raise Suspend(step_key=key, wake_at=deadline, waiting_for=types)

    def _consume(self, key, name, entry, types, deadline, delta) -> WorkflowStepEvent | None:
        """Take the oldest buffered event of ``types`` that arrived by ``deadline``, if there is one."""

        def record(event, now):
            result = {"type": event.type, "payload": event.payload, "timestamp": _iso(event.received_at)}
            if entry is None:
                return self.writer.insert(
                    key=key, name=name, kind=StepKind.WAIT, status=StepStatus.SUCCEEDED,
                    config={"type": types, "timeout": int(delta / timedelta(milliseconds=1))},
                    result=result, wake_at=deadline, started_at=now, ended_at=now,
                )
            return self.writer.update(entry.id, status=StepStatus.SUCCEEDED, result=result, ended_at=now)

        taken = self.writer.consume_event(types, deadline, record)
        if taken is None:
            return None
        event, status = taken
        self.after_write(status, key)
        return WorkflowStepEvent(type=event.type, payload=event.payload, timestamp=event.received_at)


def _to_the_end(body):
    """Call a step's body; an ``async def`` body's coroutine runs to its end in an event loop of its own."""
    returned = body()
    if inspect.iscoroutine(returned):
        return asyncio.run(returned)
    return returned


def entry_timeout(entry: Entry, fallback: timedelta) -> timedelta:
    return entry.wake_at - entry.started_at if entry.wake_at and entry.started_at else fallback


def _step_event(result: dict) -> WorkflowStepEvent:
    return WorkflowStepEvent(
        type=result["type"], payload=result["payload"], timestamp=datetime.fromisoformat(result["timestamp"])
    )


def _as_wake_time(name: str, value) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidStepInput(
                f"step.sleep_until({name!r}): {value!r} has no time zone; pass an aware datetime "
                "(django.utils.timezone.now() + timedelta(...)) or epoch seconds"
            )
        return value.astimezone(UTC)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    raise InvalidStepInput(
        f"step.sleep_until({name!r}): expected an aware datetime or epoch seconds, got {type(value).__name__}"
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat()
