"""What ``step.sleep``, ``step.sleep_until`` and ``step.wait_for_event`` do on the replay: a wait is a
journal row with a wake time (and, for an event, the types it takes), answered from the journal once it
is over; an event that arrived before the wait is taken from the inbox when the wait is reached.
Mixed into the replay's steps (``step.JournaledSteps``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django_workflows import clock
from django_workflows.control_flow import Suspend
from django_workflows.definition import WorkflowStepEvent
from django_workflows.durations import parse_duration
from django_workflows.error_journal import describe_error, rebuild_error
from django_workflows.errors import InvalidEvent, InvalidStepInput, WorkflowConfigError, WorkflowTimeoutError
from django_workflows.models import StepKind, StepStatus
from django_workflows.replay_state import ReplayState
from django_workflows.store.journal import Entry
from django_workflows.validation import validate_event_type

MAX_WAIT = timedelta(days=365)

_ZERO = timedelta(0)


class WaitSteps(ReplayState):
    # step.sleep and step.sleep_until

    def sleep(self, name: str, *, duration=None, until=None, key: str | None = None) -> None:
        now = clock.now()
        if until is None:
            delta = parse_duration(duration, what=f"step.sleep({name!r})")
            if delta > MAX_WAIT:
                raise InvalidStepInput(f"step.sleep({name!r}): {duration!r} is longer than the limit of 365 days")
        key = key or self.next_key(name)
        entry = self.lookup(key, StepKind.SLEEP)
        if entry is not None:
            if entry.status == StepStatus.SUCCEEDED:
                return
            assert entry.wake_at is not None  # a sleep journaled as waiting has its wake time
            if entry.wake_at <= now:
                _, status = self.writer.update(entry.id, status=StepStatus.SUCCEEDED, ended_at=entry.wake_at)
                self.report.timer_fired(key, name, "sleep", entry.wake_at, self.started_at)
                self.report.step_succeeded(key, name, StepKind.SLEEP)
                self.after_write(status, key)
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
            _, status = self.writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.SUCCEEDED,
                                           config=config, wake_at=wake_at, started_at=now, ended_at=now)
            self.report.step_succeeded(key, name, StepKind.SLEEP)
            self.after_write(status, key)
            return
        self.writer.insert(key=key, name=name, kind=StepKind.SLEEP, status=StepStatus.WAITING, config=config,
                           wake_at=wake_at, started_at=now)
        raise Suspend(step_key=key, wake_at=wake_at, reason="sleep")

    # step.wait_for_event

    def wait_for_event(self, name: str, event_type, timeout, key: str | None = None) -> WorkflowStepEvent:
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
        key = key or self.next_key(name)
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
                assert entry.error is not None  # a failed step's row has its error
                raise rebuild_error(entry.error)
            assert entry.wake_at is not None  # a wait journaled as waiting has its deadline
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

            def record_timeout():
                return self.writer.update(entry.id, status=StepStatus.FAILED, error=error, ended_at=deadline)

            # An event received by the deadline may have been committed since the inbox was read empty
            # (its sender's transaction ended late): it is taken, and the wait has not timed out.
            while (status := self.writer.time_out_wait(types, deadline, record_timeout)) is None:
                received = self._consume(key, name, entry, types, deadline, delta)
                if received is not None:
                    return received
            self.report.timer_fired(key, name, "timeout", deadline, self.started_at)
            self.report.step_failed(key, name, StepKind.WAIT, None, timeout_error)
            self.after_write(status, key)
            raise timeout_error
        raise Suspend(step_key=key, wake_at=deadline, waiting_for=types, reason="event")

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
        received = WorkflowStepEvent(type=event.type, payload=event.payload, timestamp=event.received_at)
        self.report.step_succeeded(key, name, StepKind.WAIT, None, received)
        self.after_write(status, key)
        return received


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
