"""The lifecycle signals (django_workflows.signals) and the engine's log records, on a real database."""

import logging
from datetime import timedelta

import pytest
from django.db import connection

from django_workflows import NonRetryableError, WorkflowEntrypoint, signals, workflows
from django_workflows.shared import lifecycle
from django_workflows.shared.definition import WorkflowStepEvent
from django_workflows.reading.describe import REDACTED
from django_workflows.models import Instance, InstanceStatus
from django_workflows.testing import run_workflows
from tests.testapp.workflows import calls

LIFECYCLE = ("instance_created", "instance_started", "step_succeeded", "step_retrying", "step_failed",
             "timer_fired", "instance_waiting", "instance_paused", "instance_resumed", "instance_restarted",
             "instance_completed", "instance_errored", "instance_terminated")
SECRET = "tok-7f3a-secret"


class SignalsTour(WorkflowEntrypoint):
    """A retry after a delay, a sleep, a wait for an event, a sensitive step, then complete."""

    name = "signals-tour"

    def run(self, event, step):
        def charge():
            calls.update(["tour-charge"])
            if calls["tour-charge"] == 1:
                raise ValueError("card network down")
            return {"charged": 120}

        charged = step.do("charge", charge,
                          config={"retries": {"limit": 3, "delay": "10 seconds", "backoff": "constant"}})
        step.sleep("cool off", "1 hour")
        decision = step.wait_for_event("approval", "approve", timeout="1 day")
        step.do("token", lambda: SECRET, config={"sensitive": "output"})
        return {"charged": charged["charged"], "outcome": decision.payload["outcome"]}


class SignalsFails(WorkflowEntrypoint):
    """A wait that times out (caught), then a step that fails for good (not caught): errored."""

    name = "signals-fails"

    def run(self, event, step):
        try:
            step.wait_for_event("reply", "reply", timeout="1 hour")
        except Exception:  # noqa: BLE001 - the timeout, caught as run() would
            pass

        def refuse():
            raise NonRetryableError("refused for good")

        step.do("refuse", refuse)


class SignalsUndo(WorkflowEntrypoint):
    """A step with an undo, then a long sleep: terminate(rollback=True) runs the undo."""

    name = "signals-undo"

    def run(self, event, step):
        step.do("reserve", lambda: "reserved", config={"rollback": lambda output: calls.update(["undo"])})
        step.sleep("hold", "1 day")
        return "done"


class Recorder:
    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def __call__(self, name):
        def receiver(sender, signal, **kwargs):
            assert sender is Instance
            self.sent.append((name, kwargs))
        return receiver

    def of(self, name: str) -> list[dict]:
        return [kwargs for sent, kwargs in self.sent if sent == name]

    def names(self) -> list[str]:
        return [name for name, _ in self.sent]


@pytest.fixture
def received():
    recorder = Recorder()
    for name in LIFECYCLE:
        getattr(signals, name).connect(recorder(name), weak=False, dispatch_uid=f"test-{name}")
    yield recorder
    for name in LIFECYCLE:
        getattr(signals, name).disconnect(dispatch_uid=f"test-{name}")


@pytest.fixture
def env(transactional_db):
    """The recording executor and the manual clock, outside any transaction: signals go at once."""
    with run_workflows() as test_env:
        yield test_env


def _ids(instance) -> dict:
    return {"instance_pk": instance.pk, "instance_id": instance.id}


def test_each_signal_fires_once_with_its_arguments_through_retry_sleep_event_and_completion(env, received):
    instance = workflows.get("signals-tour").create(id="tour-1")
    ids = {**_ids(instance), "workflow_name": "signals-tour"}
    assert received.names() == ["instance_created"]
    assert received.of("instance_created") == [ids]

    env.run_until_idle()  # attempt 1 fails: the retry waits 10 s
    [retrying] = received.of("step_retrying")
    error = retrying.pop("error")
    assert isinstance(error, ValueError) and str(error) == "card network down"
    retry_at = retrying.pop("wake_at")
    assert retrying == {**ids, "step_key": "charge-1", "step_name": "charge", "kind": "do", "attempt": 1}
    assert retry_at == env.now + timedelta(seconds=10)
    assert received.of("instance_waiting") == [
        {**ids, "step_key": "charge-1", "reason": "retry", "wake_at": retry_at, "waiting_for": None}]

    env.clock.advance(timedelta(seconds=12))  # the worker comes 2 s late
    env.run_until_idle()  # attempt 2 succeeds; the sleep begins
    sleep_until = env.now + timedelta(hours=1)
    env.clock.advance(timedelta(hours=1, seconds=30))  # 30 s late
    env.run_until_idle()  # the sleep ends; the wait begins
    deadline = env.now + timedelta(days=1)
    instance.send_event(type="approve", payload={"outcome": "yes"})
    env.run_until_idle()  # the event is taken, the sensitive step runs, complete

    assert instance.status()["status"] == "complete"
    counts = {name: received.names().count(name) for name in LIFECYCLE}
    assert counts == {"instance_created": 1, "instance_started": 4, "step_succeeded": 4, "step_retrying": 1,
                      "step_failed": 0, "timer_fired": 2, "instance_waiting": 3, "instance_paused": 0,
                      "instance_resumed": 0, "instance_restarted": 0, "instance_completed": 1,
                      "instance_errored": 0, "instance_terminated": 0}
    started = received.of("instance_started")
    assert [s["resumed"] for s in started] == [False, True, True, True]
    assert all(s["epoch"] >= 1 and s["instance_pk"] == instance.pk for s in started)

    assert received.of("timer_fired") == [
        {**ids, "step_key": "charge-1", "step_name": "charge", "kind": "retry", "wake_at": retry_at,
         "late_by": timedelta(seconds=2)},
        {**ids, "step_key": "cool off-1", "step_name": "cool off", "kind": "sleep", "wake_at": sleep_until,
         "late_by": timedelta(seconds=30)},
    ]
    charge, sleep, approval, token = received.of("step_succeeded")
    assert charge == {**ids, "step_key": "charge-1", "step_name": "charge", "kind": "do", "attempt": 2,
                      "result": {"charged": 120}}
    assert sleep == {**ids, "step_key": "cool off-1", "step_name": "cool off", "kind": "sleep",
                     "attempt": None, "result": None}
    event = approval.pop("result")
    assert isinstance(event, WorkflowStepEvent)
    assert (event.type, event.payload) == ("approve", {"outcome": "yes"})
    assert approval == {**ids, "step_key": "approval-1", "step_name": "approval", "kind": "waitForEvent",
                        "attempt": None}
    # A sensitive step's result never leaves the journal through a signal.
    assert token == {**ids, "step_key": "token-1", "step_name": "token", "kind": "do", "attempt": 1,
                     "result": REDACTED}
    assert received.of("instance_waiting")[1:] == [
        {**ids, "step_key": "cool off-1", "reason": "sleep", "wake_at": sleep_until, "waiting_for": None},
        {**ids, "step_key": "approval-1", "reason": "event", "wake_at": deadline, "waiting_for": ["approve"]},
    ]
    assert received.of("instance_completed") == [{**ids, "output": {"charged": 120, "outcome": "yes"}}]
    # The journal agrees with what the signals told.
    assert Instance.objects.get(pk=instance.pk).output == {"charged": 120, "outcome": "yes"}


def test_an_errored_instance_after_a_wait_timed_out(env, received):
    instance = workflows.get("signals-fails").create(id="fails-1")
    ids = {**_ids(instance), "workflow_name": "signals-fails"}
    env.run_until_idle()
    deadline = env.now + timedelta(hours=1)
    env.clock.advance(timedelta(hours=1, seconds=5))
    env.run_until_idle()

    assert instance.status()["status"] == "errored"
    assert received.of("timer_fired") == [{**ids, "step_key": "reply-1", "step_name": "reply",
                                           "kind": "timeout", "wake_at": deadline,
                                           "late_by": timedelta(seconds=5)}]
    wait, refuse = received.of("step_failed")
    assert type(wait.pop("error")).__name__ == "WorkflowTimeoutError"
    assert wait == {**ids, "step_key": "reply-1", "step_name": "reply", "kind": "waitForEvent",
                    "attempt": None}
    assert isinstance(refuse.pop("error"), NonRetryableError)
    assert refuse == {**ids, "step_key": "refuse-1", "step_name": "refuse", "kind": "do", "attempt": 1}
    [errored] = received.of("instance_errored")
    assert isinstance(errored.pop("error"), NonRetryableError)
    assert errored == {**ids, "rollback": None}
    assert received.of("step_retrying") == [] and received.of("instance_completed") == []


def test_terminated_paused_resumed_and_restarted(env, received):
    sleeper = workflows.get("sleeper").create(id="steered", params={})
    ids = {**_ids(sleeper), "workflow_name": "sleeper"}
    env.run_until_idle()
    sleeper.pause()
    assert received.of("instance_paused") == [{**ids, "step_key": ""}]
    sleeper.resume()
    assert received.of("instance_resumed") == [ids]
    sleeper.restart()
    assert received.of("instance_restarted") == [{**ids, "from_step": None}]
    env.run_until_idle()
    sleeper.restart(from_step="nap")
    assert received.of("instance_restarted")[1] == {**ids, "from_step": "nap-1"}
    sleeper.terminate()
    assert received.of("instance_terminated") == [{**ids, "rollback": None}]

    # Paused by the replay that was running when pause() was asked (a step pauses its own instance).
    pausable = workflows.get("pausable").create(id="pauses-itself", params={"pause_self": True})
    env.run_until_idle()
    assert pausable.status()["status"] == "paused"
    assert received.of("instance_paused")[1:] == [
        {**_ids(pausable), "workflow_name": "pausable", "step_key": "first-1"}]

    # Terminated with a rollback: by the replay that ran the undo.
    undo = workflows.get("signals-undo").create(id="undone")
    env.run_until_idle()
    undo.terminate(rollback=True)
    assert len(received.of("instance_terminated")) == 1  # not yet: the undo runs first
    env.run_until_idle()
    assert calls["undo"] == 1
    assert received.of("instance_terminated")[1] == {
        **_ids(undo), "workflow_name": "signals-undo", "rollback": {"status": "complete", "undone": 1}}
    assert received.of("instance_completed") == [] and received.of("instance_errored") == []


def test_a_step_that_terminates_its_own_instance_sends_terminated_once_and_nothing_after(env, received):
    instance = workflows.get("terminator").create(id="stops-itself")
    env.run_until_idle()
    assert instance.status()["status"] == "terminated"
    assert received.of("instance_terminated") == [
        {**_ids(instance), "workflow_name": "terminator", "rollback": None}]
    # The replay was fenced at its next write: no step succeeded after it, nothing completed.
    assert received.of("step_succeeded") == [] and received.of("instance_completed") == []


def test_signals_of_a_replay_inside_a_transaction_wait_for_its_commit(workflows_env, received,
                                                                     django_capture_on_commit_callbacks):
    assert connection.in_atomic_block  # the test's own transaction
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        instance = workflows.get("three-steps").create(id="in-a-transaction")
        workflows_env.run_until_idle()
        assert instance.status()["status"] == "complete"
    assert received.sent == []
    for callback in callbacks:
        callback()
    assert received.names() == ["instance_created", "instance_started", "step_succeeded", "step_succeeded",
                                "step_succeeded", "instance_completed"]


def test_a_receiver_that_raises_breaks_neither_the_replay_nor_the_caller(env, received, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    hooked = [signals.replay_started, signals.replay_finished, signals.instance_created,
              signals.instance_started, signals.step_succeeded, signals.step_retrying,
              signals.instance_waiting, signals.timer_fired, signals.instance_completed]
    for signal in hooked:
        signal.connect(broken, weak=False, dispatch_uid="test-broken")
    try:
        with caplog.at_level(logging.ERROR, logger="django.dispatch"):
            retries = {"retries": {"limit": 2, "delay": "1 second"}}
            instance = workflows.get("flaky").create(id="survives", params={"failures": 1, "config": retries})
            env.run_until_idle()
            env.advance("1 second")
    finally:
        for signal in hooked:
            signal.disconnect(dispatch_uid="test-broken")
    assert instance.status() == {"status": "complete", "output": "ok", "error": None}
    # The other receivers were called all the same, and each failure was logged.
    assert received.names().count("step_succeeded") == 1 and received.names().count("instance_completed") == 1
    failures = [r for r in caplog.records if r.name == "django.dispatch" and "receiver bug" in r.getMessage()]
    assert len(failures) == 2 + 2 + 1 + 2 + 1 + 1 + 1 + 1 + 1  # replays 2 × (started, finished), ...


def test_log_records_carry_the_instance_and_step_at_their_levels(env, caplog):
    with caplog.at_level(logging.DEBUG, logger="django_workflows"):
        instance = workflows.get("signals-tour").create(id="logged")
        env.run_until_idle()
        env.advance("10 seconds")
        env.advance("1 hour")
        instance.send_event(type="approve", payload={"outcome": "yes"})
        env.run_until_idle()
        failing = workflows.get("uncaught").create(id="logged-failure")
        env.run_until_idle()
    assert instance.status()["status"] == "complete" and failing.status()["status"] == "errored"
    records = [r for r in caplog.records if r.name.startswith("django_workflows.")]
    by_message = {r.getMessage(): r for r in records}

    retry = [r for r in records if "retrying" in r.getMessage()]
    assert len(retry) == 1
    assert (retry[0].levelno, retry[0].name) == (logging.WARNING, "django_workflows.engine.step")
    record = retry[0]
    assert (record.workflow, record.instance_id, record.instance_pk, record.step, record.attempt) == (
        "signals-tour", "logged", instance.pk, "charge-1", 1)
    assert "ValueError: card network down" in retry[0].getMessage()

    succeeded = by_message["signals-tour/logged: step 'charge-1' succeeded (attempt 2): {'charged': 120}"]
    assert (succeeded.levelno, succeeded.step, succeeded.attempt) == (logging.DEBUG, "charge-1", 2)
    complete = by_message["signals-tour/logged: complete"]
    assert (complete.levelno, complete.name, complete.step) == (
        logging.INFO, "django_workflows.engine.replay", None)
    created = by_message["signals-tour/logged: created"]
    assert (created.levelno, created.name) == (logging.DEBUG, "django_workflows.instances")

    [errored] = [r for r in records if getattr(r, "instance_id", None) == "logged-failure"
                 and r.levelno == logging.ERROR]
    assert errored.name == "django_workflows.engine.replay"
    assert errored.getMessage() == "uncaught/logged-failure: errored: RuntimeError: it broke"
    assert errored.exc_info is not None and errored.exc_info[0] is RuntimeError
    failed = [r for r in records if getattr(r, "instance_id", None) == "logged-failure"
              and "failed for good" in r.getMessage()]
    assert [(r.levelno, r.step, r.attempt) for r in failed] == [(logging.WARNING, "boom-1", 1)]


def test_a_sensitive_output_is_never_logged(env, caplog):
    with caplog.at_level(logging.DEBUG):
        instance = workflows.get("signals-tour").create(id="secretive")
        env.run_until_idle()
        env.advance("10 seconds")
        env.advance("1 hour")
        instance.send_event(type="approve", payload={"outcome": "yes"})
        env.run_until_idle()
    assert instance.status()["status"] == "complete"
    assert Instance.objects.get(pk=instance.pk).status == InstanceStatus.COMPLETE
    token = [r for r in caplog.records if getattr(r, "step", None) == "token-1"]
    assert [r.getMessage() for r in token] == [
        f"signals-tour/secretive: step 'token-1' succeeded (attempt 1): {REDACTED}"]
    assert SECRET not in caplog.text
    assert all(SECRET not in repr(vars(r)) for r in caplog.records)
    # A step that is not sensitive does show its result at DEBUG: the test would see a leak.
    assert "{'charged': 120}" in caplog.text


def test_a_disabled_level_builds_no_message(env, caplog, monkeypatch):
    shown = []
    original = lifecycle.shown_result
    monkeypatch.setattr(lifecycle, "shown_result", lambda value, sensitive: shown.append(value) or original(
        value, sensitive))
    with caplog.at_level(logging.INFO, logger="django_workflows"):
        workflows.get("three-steps").create(id="quiet")
        env.run_until_idle()
    assert shown == []
    assert not [r for r in caplog.records if r.levelno < logging.INFO]
    with caplog.at_level(logging.DEBUG, logger="django_workflows"):
        workflows.get("three-steps").create(id="verbose")
        env.run_until_idle()
    assert len(shown) == 3
