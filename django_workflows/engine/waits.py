"""What ``step.sleep``, ``step.sleep_until`` and ``step.wait_for_event`` do on the replay: a wait is a
journal row with a wake time (and, for an event, the types it takes), answered from the journal once it
is over; an event that arrived before the wait is taken from the inbox when the wait is reached.
A collaborator of the replay (``step_host``); a child's wait for its end (``children``) is a wait row too."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django_workflows.shared import clock, large_values
from django_workflows.foundations.control_flow import Suspend
from django_workflows.shared.definition import WorkflowStepEvent
from django_workflows.shared.durations import parse_duration
from django_workflows.shared.error_journal import describe_error, rebuild_error
from django_workflows.errors import (
    InvalidEvent,
    InvalidStepInput,
    StepResultError,
    WorkflowConfigError,
    WorkflowTimeoutError,
)
from django_workflows.models import StepKind, StepStatus
from django_workflows.engine.read_back import read_back
from django_workflows.engine.step_host import StepHost
from django_workflows.store.journal import Entry, JournalWriter
from django_workflows.foundations.validation import validate_event_type

MAX_WAIT = timedelta(days=365)

_ZERO = timedelta(0)


class WaitRow:
    """A wait's journal row: the one journaled (``entry``), or the one this replay writes; a sleep's,
    an event's, or a child's end's (``children``), which is a wait for an event of the engine's own."""

    __slots__ = ("key", "name", "entry", "types", "timeout", "deadline")

    def __init__(self, key: str, name: str, entry: Entry | None, types: list[str], timeout: timedelta):
        self.key, self.name, self.entry, self.types, self.timeout = key, name, entry, types, timeout
        if entry is None:
            self.deadline = clock.now() + timeout
        else:
            assert entry.wake_at is not None  # a wait journaled as waiting has its deadline
            self.deadline = entry.wake_at

    def config(self) -> dict[str, Any]:
        return {"type": self.types, "timeout": int(self.timeout / timedelta(milliseconds=1))}

    def start(self, writer: JournalWriter, now: datetime) -> None:
        """Journal the wait as begun."""
        writer.insert(key=self.key, name=self.name, kind=StepKind.WAIT, status=StepStatus.WAITING,
                      config=self.config(), wake_at=self.deadline, started_at=now)

    def succeed(self, writer: JournalWriter, result: dict[str, Any], now: datetime) -> tuple[int, str]:
        """Journal the wait as over with ``result`` (the event it took): the row's id, the instance's status."""
        if self.entry is None:
            return writer.insert(key=self.key, name=self.name, kind=StepKind.WAIT, status=StepStatus.SUCCEEDED,
                                 config=self.config(), result=result, wake_at=self.deadline, started_at=now,
                                 ended_at=now)
        return writer.update(self.entry.id, status=StepStatus.SUCCEEDED, result=result, ended_at=now)

    def time_out(self, writer: JournalWriter, error: BaseException) -> tuple[int, str]:
        """Journal the wait (begun in an earlier replay) as failed with its timeout ``error``."""
        assert self.entry is not None  # only a wait that began can run out
        return writer.update(self.entry.id, status=StepStatus.FAILED, error=describe_error(error),
                             ended_at=self.deadline)


def finished(entry: Entry) -> bool:
    """Whether the journal has the wait over: True if it took its event or woke; its error raised again
    if it failed (a timeout); False if it still waits."""
    if entry.status == StepStatus.SUCCEEDED:
        return True
    if entry.status == StepStatus.FAILED:
        assert entry.error is not None  # a failed step's row has its error
        raise rebuild_error(entry.error)
    return False


class WaitSteps:
    """The replay's side of sleeps and waits for events, given the host. ``declared_events`` are the
    workflow's declared events by type (None: it accepts any type), set once the workflow is known."""

    __slots__ = ("host", "declared_events")

    def __init__(self, host: StepHost):
        self.host = host
        self.declared_events: dict[str, Any] | None = None

    # step.sleep and step.sleep_until

    def sleep(self, name: str, *, duration: Any = None, until: Any = None, key: str | None = None) -> None:
        host, writer = self.host, self.host.writer
        now = clock.now()
        if until is None:
            delta = parse_duration(duration, what=f"step.sleep({name!r})")
            if delta > MAX_WAIT:
                raise InvalidStepInput(f"step.sleep({name!r}): {duration!r} is longer than the limit of 365 days")
        key = key or host.next_key(name)
        entry = host.lookup(key, StepKind.SLEEP)
        if entry is not None:
            if entry.status == StepStatus.SUCCEEDED:
                if entry.woke and entry.wake_at is not None:
                    # Journaled over by the statement that took the lease: its timer fired for this replay.
                    host.report.timer_fired(key, name, "sleep", entry.wake_at, host.started_at)
                    host.report.step_succeeded(key, name, StepKind.SLEEP)
                return
            assert entry.wake_at is not None  # a sleep journaled as waiting has its wake time
            if entry.wake_at <= now:
                _, status = writer.update(entry.id, status=StepStatus.SUCCEEDED, ended_at=entry.wake_at)
                host.report.timer_fired(key, name, "sleep", entry.wake_at, host.started_at)
                host.report.step_succeeded(key, name, StepKind.SLEEP)
                host.after_write(status, key)
                return
            raise Suspend(step_key=key, wake_at=entry.wake_at, reason="sleep")
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
            _, status = writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.SUCCEEDED,
                                      config=config, wake_at=wake_at, started_at=now, ended_at=now)
            host.report.step_succeeded(key, name, StepKind.SLEEP)
            host.after_write(status, key)
            return
        writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.WAITING, config=config,
                      wake_at=wake_at, started_at=now)
        raise Suspend(step_key=key, wake_at=wake_at, reason="sleep")

    # step.wait_for_event

    def wait_for_event(self, name: str, event_type: Any, timeout: Any, key: str | None = None) -> WorkflowStepEvent:
        host = self.host
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
        key = key or host.next_key(name)
        # Not counted toward the step limit: as on Cloudflare, only step.do is.
        entry = host.lookup(key, StepKind.WAIT)
        declared = self.declared_events
        undeclared = [t for t in types if declared is not None and t not in declared]
        if undeclared and entry is None:
            # Nobody could ever send it: the wait would only run out its timeout. A wait journaled
            # before its type left the declaration goes on as it began.
            host.fail_fatally(WorkflowConfigError(
                f"step.wait_for_event({name!r}) waits for {', '.join(map(repr, undeclared))}, which workflow "
                f"{host.instance.workflow_name!r} does not declare in its events; add it there, or "
                "wait for a declared type.",
                step=name,
            ))
        if entry is not None and finished(entry):
            def where() -> str:
                return f"instance {host.instance}, step {key!r}"

            return self.as_declared(_step_event(entry.result, entry.typed, where), name)
        row = WaitRow(key, name, entry, types, delta)
        received = self.consume(row)
        if received is not None:
            return received
        now = clock.now()
        if entry is None:
            row.start(host.writer, now)
        elif row.deadline <= now:
            timeout_error = WorkflowTimeoutError(
                f"Step {name!r}: no event of type {' or '.join(map(repr, types))} arrived within "
                f"{entry_timeout(entry, delta)}",
                step=key, event_types=types,
            )
            # An event received by the deadline may have been committed since the inbox was read empty
            # (its sender's transaction ended late): it is taken, and the wait has not timed out.
            while (status := host.writer.time_out_wait(types, row.deadline,
                                                       lambda: row.time_out(host.writer, timeout_error))) is None:
                received = self.consume(row)
                if received is not None:
                    return received
            host.report.timer_fired(key, name, "timeout", row.deadline, host.started_at)
            host.report.step_failed(key, name, StepKind.WAIT, None, timeout_error)
            host.after_write(status, key)
            raise timeout_error
        raise Suspend(step_key=key, wake_at=row.deadline, waiting_for=types, reason="event")

    def as_declared(self, event: WorkflowStepEvent, name: str) -> WorkflowStepEvent:
        """``event`` with its payload as the Pydantic model its type declares as schema, if it declares
        one: on the first run and on every replay, as the inbox and the journal keep the payload sent."""
        rule = (self.declared_events or {}).get(event.type)
        model = getattr(rule, "model", None)
        if model is None:
            return event
        from pydantic import ValidationError

        try:
            payload = model.model_validate(event.payload)
        except ValidationError as exc:
            # Validated as it arrived: the model has changed since. The journal is left as it is.
            raise StepResultError(
                f"Step {name!r}: the payload of event {event.type!r} no longer matches its schema "
                f"{model.__qualname__}: {exc.errors(include_url=False)[0]['msg']}; make the model accept "
                "payloads sent before the change", step=name) from None
        return WorkflowStepEvent(type=event.type, payload=payload, timestamp=event.timestamp)

    def consume(self, row: WaitRow) -> WorkflowStepEvent | None:
        """Take the oldest buffered event of the row's types that arrived by its deadline, if there is
        one, and journal the wait as over with it."""
        host = self.host

        def record(event: Any, now: datetime) -> tuple[int, str]:
            return row.succeed(host.writer, {"type": event.type, "payload": event.payload,
                                             "timestamp": _iso(event.received_at)}, now)

        taken = host.writer.consume_event(row.types, row.deadline, record)
        if taken is None:
            return None
        event, status = taken
        # The journal keeps the event as the inbox held it: a large payload, by its reference.
        payload = read_back(event.payload, True, lambda: f"instance {host.instance}, step {row.key!r}")
        received = self.as_declared(WorkflowStepEvent(type=event.type, payload=payload,
                                                      timestamp=event.received_at), row.name)
        host.report.step_succeeded(row.key, row.name, StepKind.WAIT, None, received)
        host.after_write(status, row.key)
        return received


def entry_timeout(entry: Entry, fallback: timedelta) -> timedelta:
    return entry.wake_at - entry.started_at if entry.wake_at and entry.started_at else fallback


def _step_event(result: dict[str, Any], typed: bool, where: Callable[[], str]) -> WorkflowStepEvent:
    return WorkflowStepEvent(type=result["type"], payload=read_back(result["payload"], typed, where),
                             timestamp=datetime.fromisoformat(result["timestamp"]))


def _as_wake_time(name: str, value: object) -> datetime:
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
