"""The replay engine: runs ``run()`` from the top, answering finished steps from the journal.

One replay holds the instance's lease, loads the journal in one query, and
calls ``run(event, step)``. A step found in the journal returns its journaled
result (or raises its journaled error) without running again; a step not
found runs, is journaled, and the replay goes on. A step that must wait (a
sleep, a retry delay, an event not yet here) raises ``Suspend``; the engine
records why and until when, releases the lease, and the worker is free.
"""

from __future__ import annotations

import importlib
import time
import traceback
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError

from django_workflows import clock, declared_events
from django_workflows.conf import HARD_STEP_LIMIT, workflow_settings
from django_workflows.definition import WorkflowEvent, WorkflowStepEvent, registry
from django_workflows.durations import parse_duration
from django_workflows.errors import (
    InvalidEvent,
    InvalidStepInput,
    NonDeterminismError,
    NonRetryableError,
    PoisonInstance,
    StepInTransaction,
    StepLimitExceeded,
    StepResultError,
    StepTimeoutError,
    WorkflowConfigError,
    WorkflowError,
    WorkflowNotFound,
    WorkflowTimeoutError,
)
from django_workflows.executors import enqueue
from django_workflows.models import Instance, InstanceStatus, StepKind, StepStatus
from django_workflows.policy import StepPolicy, build_policy
from django_workflows.serialization import NotJournalable, encode, storable_text
from django_workflows.signals import replay_finished, replay_started
from django_workflows.store import leases
from django_workflows.store.journal import (
    WAITING_UNLESS_PAUSE_ASKED,
    Entry,
    Fenced,
    JournalWriter,
    StoreError,
    encoded,
    load,
)
from django_workflows.timeouts import AttemptTimedOut, call_with_timeout
from django_workflows.validation import validate_event_type, validate_step_name

MAX_WAIT = timedelta(days=365)

_ZERO = timedelta(0)
# After a StoreError: when the wake-up loop replays the instance again, and the pauses between the
# attempts to give its lease back (the database may be restarting or failing over).
ABANDONED_REPLAY_DELAY = timedelta(seconds=2)
# How long an instance whose workflow is not registered here waits before a worker looks again: long
# enough not to spin while the deploy finishes, short enough that the new workers pick it up soon.
UNREGISTERED_RECHECK = timedelta(seconds=30)
ABANDON_PAUSES = (0.0, 0.5, 2.0)
_USER_FAILURES = (Exception, SystemExit, KeyboardInterrupt)


class Suspend(BaseException):
    """The replay must stop and wait. A BaseException, so ``except Exception:`` never swallows it."""

    def __init__(self, *, step_key: str = "", wake_at: datetime | None = None, waiting_for=None,
                 pause: bool = False):
        super().__init__(step_key)
        self.step_key = step_key
        self.wake_at = wake_at
        self.waiting_for = waiting_for
        self.pause = pause


# -- errors in the journal ------------------------------------------------------------------------

def describe_error(exc: BaseException) -> dict:
    """An error as it is journaled: Cloudflare's ``{name, message}``, plus where its class lives."""
    cls = type(exc)
    # storable_text: a message may hold NUL or half a surrogate pair, which the journal cannot store.
    message = storable_text(str(exc))
    return {"name": cls.__name__, "message": message, "type": f"{cls.__module__}:{cls.__qualname__}"}


class StepFailed(WorkflowError):
    """A journaled step error whose original class cannot be rebuilt here."""


def rebuild_error(error: dict) -> Exception:
    """The journaled error as an exception of its original class, so ``except`` clauses match alike
    on the first run and on every replay."""
    message = error.get("message", "")
    cls = None
    module_name, _, qualname = (error.get("type") or "").partition(":")
    if module_name and qualname:
        try:
            cls = importlib.import_module(module_name)
            for part in qualname.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError):
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return StepFailed(f"{error.get('name', 'Error')}: {message}", error_name=error.get("name"))
    try:
        exc = cls(message)
    except Exception:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
    return exc


def _iso(moment: datetime) -> str:
    return moment.isoformat()


# -- the step API ---------------------------------------------------------------------------------

class WorkflowStep:
    """The ``step`` argument of ``run(event, step)``."""

    __slots__ = ("_replay",)

    def __init__(self, replay: Replay):
        self._replay = replay

    def do(self, name: str, fn=None, *, config: dict | None = None):
        """Run ``fn`` as a durable step named ``name``, or, without ``fn``, decorate a function
        so that calling it runs the step: ``@step.do("charge")``."""
        if fn is None:
            validate_step_name(name)

            def decorator(func):
                def run_step(*args, **kwargs):
                    call = (lambda: func(*args, **kwargs)) if args or kwargs else func
                    return self._replay.call(self._replay.do, name, call, config)

                run_step.__name__ = getattr(func, "__name__", "step")
                run_step.__doc__ = getattr(func, "__doc__", None)
                return run_step

            return decorator
        return self._replay.call(self._replay.do, name, fn, config)

    def sleep(self, name: str, duration) -> None:
        """Wait ``duration`` (milliseconds, or "N unit(s)"), holding no worker."""
        self._replay.call(self._replay.sleep, name, duration=duration)

    def sleep_until(self, name: str, timestamp) -> None:
        """Wait until ``timestamp`` (an aware datetime, or epoch seconds), holding no worker."""
        self._replay.call(self._replay.sleep, name, until=timestamp)

    def wait_for_event(self, name: str, type, timeout="24 hours") -> WorkflowStepEvent:  # noqa: A002
        """Wait for an event of ``type`` (or of any type in a list), up to ``timeout``."""
        return self._replay.call(self._replay.wait_for_event, name, type, timeout)


_default_policy: tuple[dict, StepPolicy] | None = None


def default_policy() -> StepPolicy:
    global _default_policy
    defaults = workflow_settings.DEFAULT_STEP_CONFIG
    if _default_policy is None or _default_policy[0] is not defaults:
        _default_policy = (defaults, build_policy(None, defaults, "DJANGO_WORKFLOWS['DEFAULT_STEP_CONFIG']"))
    return _default_policy[1]


# -- one replay -----------------------------------------------------------------------------------

def replay(instance_pk: int) -> bool:
    """Run one replay of the instance if it is runnable; return whether one ran.

    Any number of deliveries of the same replay may arrive, from any number of
    workers: the conditional UPDATE that takes the lease lets one through, and
    the others return at once.
    """
    taken = time.monotonic()
    instance = leases.take(instance_pk, str(leases.holder()), clock.now(), workflow_settings.LEASE_SECONDS)
    if instance is None:
        return False
    signal_args = {"instance_pk": instance_pk, "epoch": instance.epoch, "workflow_name": instance.workflow_name}
    replay_started.send(sender=Instance, started=time.time(), **signal_args)
    outcome, current = "fenced", Replay(instance)
    try:
        with leases.keeper.hold(instance_pk, instance.epoch, taken) as current.writer.lease:
            outcome = current.run()
    except StoreError:
        outcome = current.abandon()
    finally:
        current.writer.close()
        replay_finished.send(sender=Instance, outcome=outcome, released=current.released or time.time(),
                             **signal_args)
    return True


class Replay:
    def __init__(self, instance: leases.Claim):
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
        # The journal's step keys in the order they were first written, and how many steps this
        # replay has called: the n-th step called must be the n-th journaled one.
        self.journaled_order: list[str] | None = None
        self.steps_called = 0
        # The key of the step whose body is running: an interruption by its timeout may arrive
        # meanwhile, so the engine must not touch the journal until it returns.
        self.running_step: str | None = None
        # The workflow's declared events by type (None: it accepts any type), read once per replay.
        self.declared_events: dict | None = None
        self.result_limit = workflow_settings.MAX_STEP_RESULT_SIZE
        # Wall-clock time just before the write that releases the lease, for replay_finished.
        self.released: float | None = None

    # The outcome of the whole replay.

    def run(self) -> str:
        """Run the replay; return its outcome (the status it left, or "fenced")."""
        try:
            return self._run()
        except Fenced:
            # Terminated, restarted or taken over while this replay ran: its work is not ours to record.
            return "fenced"

    def abandon(self) -> str:
        """A statement of the engine's own failed: give the lease back and let the wake-up loop replay
        the instance shortly. The connection is dropped first, whatever state the failure left it in.
        If the database cannot be reached for that either, the lease expires and the sweeper queues
        the instance again."""
        connection = self.writer.connection
        for pause in ABANDON_PAUSES:
            time.sleep(pause)
            self.writer.close()
            connection.close()
            try:
                now = clock.now()
                released = self.writer.abandon(now, now + ABANDONED_REPLAY_DELAY)
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
        self.declared_events = declared_events.rules_for(workflow_class)
        if workflow_class.step_limit is not None:
            self.step_limit = min(workflow_class.step_limit, HARD_STEP_LIMIT)
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
        try:
            output = workflow_class().run(event, WorkflowStep(self))
        except Suspend as suspension:
            if self.fatal is not None:
                return self.errored(self.fatal, "")
            return self.suspend(suspension)
        except _USER_FAILURES as exc:
            if self.fatal is None and self.suspended is not None:
                # run() swallowed a suspension, then failed (a hand-written retry loop giving up):
                # the step it swallowed has not failed, it waits.
                return self.suspend(self.suspended)
            # SystemExit and KeyboardInterrupt raised by the workflow's own code fail the instance
            # instead of the worker: django-q2's workers ignore SIGINT, so they cannot be an operator's.
            return self.errored(self.fatal or exc, traceback.format_exc())
        if self.fatal is not None:
            return self.errored(self.fatal, "")
        if self.suspended is not None:
            # run() swallowed a suspension and returned: the instance is not done, it waits.
            return self.suspend(self.suspended)
        return self.complete(output)

    def _finish(self, **fields) -> bool:
        self.released = time.time()
        return self.writer.release(clock.now(), **fields)

    def complete(self, output) -> str:
        try:
            text, _ = encode(output, self.result_limit)
        except NotJournalable as exc:
            return self.errored(StepResultError(f"The output of run() {exc}"), "")
        now = clock.now()
        if not self._finish(status=InstanceStatus.COMPLETE, output=encoded(text), ended_at=now, wake_at=None,
                            waiting_for=None, current_step=""):
            raise Fenced()
        return InstanceStatus.COMPLETE

    def errored(self, exc: BaseException, tb: str) -> str:
        error = describe_error(exc)
        del error["type"]
        now = clock.now()
        if not self._finish(status=InstanceStatus.ERRORED, error=error, traceback=storable_text(tb),
                            ended_at=now, wake_at=None, waiting_for=None):
            raise Fenced()
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
        if not self._finish(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=clock.now() + UNREGISTERED_RECHECK,
                            waiting_for=None, waiting_reason=reason, crash_count=self.instance.crash_count):
            raise Fenced()
        return InstanceStatus.WAITING

    def suspend(self, suspension: Suspend) -> str:
        if suspension.pause:
            if not self._finish(status=InstanceStatus.PAUSED, current_step=suspension.step_key):
                raise Fenced()
            return InstanceStatus.PAUSED
        if not suspension.waiting_for:
            if not self._finish(status=WAITING_UNLESS_PAUSE_ASKED, wake_at=suspension.wake_at, waiting_for=None,
                                current_step=suspension.step_key):
                raise Fenced()
            return InstanceStatus.WAITING
        self.released = time.time()
        status = self.writer.release_to_wait_for_events(clock.now(), suspension.waiting_for,
                                                        wake_at=suspension.wake_at, current_step=suspension.step_key)
        if status is None:
            raise Fenced()
        if status == InstanceStatus.QUEUED:
            enqueue(self.pk)
        return status

    # Bookkeeping shared by the steps.

    def call(self, method, *args, **kwargs):
        """Call a step (``do``, ``sleep``, ``wait_for_event``), remembering a suspension it asks for."""
        if self.suspended is not None:
            raise self.suspended
        try:
            return method(*args, **kwargs)
        except Suspend as suspension:
            self.suspended = suspension
            raise

    def next_key(self, name) -> str:
        validate_step_name(name)
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
        count = self.occurrences.get(name, 0) + 1
        self.occurrences[name] = count
        return f"{name}-{count}"

    def fail_fatally(self, exc: WorkflowError):
        # Remembered, so the instance is errored even if run() catches it.
        self.fatal = exc
        raise exc

    def lookup(self, key: str, kind: str) -> Entry | None:
        position = self.steps_called
        self.steps_called += 1
        if self.journal:
            if self.journaled_order is None:
                # Rows are written in the order run() called the steps, and ids grow with each write.
                self.journaled_order = [k for k, _ in sorted(self.journal.items(), key=lambda item: item[1].id)]
            if position < len(self.journaled_order) and self.journaled_order[position] != key:
                expected = self.journaled_order[position]
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
                "(step.do and step.wait_for_event; sleeps do not count) at step "
                f"{key!r}. Set step_limit on the workflow class (at most {HARD_STEP_LIMIT}) "
                "or split the work across instances.",
                step=key, limit=self.step_limit,
            ))

    def after_write(self, status: str, key: str) -> None:
        if status == InstanceStatus.WAITING_FOR_PAUSE:
            raise Suspend(pause=True, step_key=key)

    # step.do

    def do(self, name: str, fn, config) -> object:
        key = self.next_key(name)
        entry = self.lookup(key, StepKind.DO)
        if entry is not None and entry.status == StepStatus.SUCCEEDED:
            self.count_step(key, journaled=True)
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
                returned = call_with_timeout(fn, timeout_seconds, self.writer.connection)
                text, value = encode(returned, self.result_limit)
            except AttemptTimedOut:
                failure = StepTimeoutError(
                    f"Step {name!r}: attempt {number} ran past its timeout of {policy.timeout}",
                    step=key, attempt=number,
                )
            except NotJournalable as exc:
                failure = StepResultError(f"Step {name!r} returned a value that {exc}", step=key)
            except _USER_FAILURES as exc:
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
        entry = self.lookup(key, StepKind.WAIT)
        self.count_step(key, journaled=entry is not None)
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
