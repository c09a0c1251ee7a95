"""step.sleep, step.sleep_until and step.wait_for_event."""

from datetime import UTC, datetime, timedelta

import pytest

from django_workflows import workflows
from django_workflows.errors import InvalidEvent, InvalidTransition
from django_workflows.models import Event, Instance, Step
from tests.testapp.workflows import calls


def start(name, params=None, id=None):
    return workflows.get(name).create(id=id, params=params if params is not None else {})


def row(instance):
    return Instance.objects.get(pk=instance.pk)


@pytest.mark.parametrize("duration, seconds", [("1 hour", 3600), (90_000, 90), ("2 days", 172800),
                                               ("1 week", 604800), ("30 seconds", 30), ("1 year", 365 * 86400)])
def test_sleep_waits_holding_no_worker_then_resumes(workflows_env, duration, seconds):
    instance = start("sleeper", {"duration": duration})
    workflows_env.run_until_idle()
    waiting = row(instance)
    assert waiting.status == "waiting"
    assert waiting.wake_at == workflows_env.now + timedelta(seconds=seconds)
    assert waiting.lease_owner == "" and waiting.lease_expires_at is None
    workflows_env.advance(timedelta(seconds=seconds - 1))
    assert row(instance).status == "waiting"
    workflows_env.advance("1 second")
    assert instance.status()["output"] == "after"
    assert calls == {"before": 1, "after": 1}
    sleep = Step.objects.get(instance_id=instance.pk, kind="sleep")
    assert sleep.status == "succeeded" and sleep.config == {"duration": seconds * 1000}


def test_sleep_until_a_datetime_and_epoch_seconds(workflows_env):
    until = workflows_env.now + timedelta(hours=5)
    a = start("sleeper", {"until": until.timestamp()})
    workflows_env.run_until_idle()
    assert row(a).wake_at == datetime.fromtimestamp(until.timestamp(), UTC)
    workflows_env.advance("5 hours")
    assert a.status()["output"] == "after"


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"what": "sleep", "value": "366 days"}, "longer than the limit of 365 days"),
        ({"what": "sleep", "value": "2 fortnights"}, "cannot parse '2 fortnights'"),
        ({"what": "sleep", "value": -1}, "is negative"),
        ({"what": "sleep", "value": None}, "expected milliseconds or a string"),
        ({"what": "sleep_until", "value": 1000.0}, "is in the past"),
        ({"what": "sleep_until", "value": "tomorrow"}, "expected an aware datetime or epoch seconds"),
        ({"what": "wait", "value": "bad type!"}, "Invalid event type 'bad type!'"),
        ({"what": "wait", "value": []}, "non-empty list"),
        ({"what": "wait", "value": "-starts-with-dash"}, "Invalid event type"),
        ({"what": "wait", "value": "x" * 101}, "Invalid event type"),
        ({"what": "wait_timeout", "value": "400 days"}, "longer than 365 days"),
    ],
)
def test_bad_sleeps_and_waits_are_clear_errors(workflows_env, params, fragment):
    instance = start("bad-call", params)
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert fragment in status["error"]["message"]


@pytest.mark.one_flavour("calls the wake-time parser directly: no workflow runs")
def test_sleep_until_a_naive_datetime_is_refused(workflows_env):
    from django_workflows.errors import InvalidStepInput
    from django_workflows.engine.waits import _as_wake_time

    with pytest.raises(InvalidStepInput, match="has no time zone"):
        _as_wake_time("nap", datetime(2030, 1, 1))


def test_72_hour_approval_wait_times_out_in_milliseconds(workflows_env):
    instance = start("approval")
    workflows_env.run_until_idle()
    waiting = row(instance)
    assert waiting.status == "waiting"
    assert waiting.waiting_for == ["manager-approval"]
    assert waiting.wake_at == workflows_env.now + timedelta(hours=72)
    workflows_env.advance("71 hours")
    assert row(instance).status == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status() == {"status": "complete", "output": {"status": "expired"}, "error": None}
    wait = Step.objects.get(instance_id=instance.pk, kind="waitForEvent")
    assert wait.status == "failed" and wait.error["name"] == "WorkflowTimeoutError"


def test_an_event_resumes_the_wait_and_is_returned(workflows_env):
    instance = start("approval")
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(hours=1))
    instance.send_event(type="manager-approval", payload={"outcome": "approved"}, sender="user:7")
    assert workflows_env.executor.queue  # the waiting instance was woken
    workflows_env.run_until_idle()
    output = instance.status()["output"]
    assert output["status"] == "approved" and output["type"] == "manager-approval"
    assert datetime.fromisoformat(output["at"]) == workflows_env.now
    event = Event.objects.get(instance_id=instance.pk)
    assert event.consumed_by.key == "approval-1" and event.sender == "user:7"
    assert calls == {"ask": 1}


def test_an_event_of_another_type_does_not_wake(workflows_env):
    instance = start("approval")
    workflows_env.run_until_idle()
    workflows_env.executor.reset()
    instance.send_event(type="something-else", payload={})
    assert not workflows_env.executor.queue
    workflows_env.run_until_idle()
    assert row(instance).status == "waiting"
    assert Event.objects.get(instance_id=instance.pk).consumed_by is None


def test_events_sent_before_the_wait_are_buffered_and_delivered_oldest_first_once(workflows_env):
    instance = start("two-waits")
    instance.send_event(type="tick", payload=1)
    workflows_env.clock.advance(timedelta(seconds=1))
    instance.send_event(type="tick", payload=2)
    workflows_env.clock.advance(timedelta(seconds=1))
    instance.send_event(type="tick", payload=3)
    workflows_env.run_until_idle()
    assert instance.status()["output"] == [1, 2]
    # The third is still in the inbox, not consumed.
    assert list(Event.objects.unconsumed().filter(instance_id=instance.pk).values_list("payload", flat=True)) == [3]


def test_the_same_event_is_not_delivered_twice(workflows_env):
    instance = start("two-waits")
    workflows_env.run_until_idle()
    instance.send_event(type="tick", payload="only")
    workflows_env.run_until_idle()
    assert row(instance).status == "waiting"
    assert Step.objects.get(instance_id=instance.pk, key="second-1").status == "waiting"
    instance.send_event(type="tick", payload="next")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["only", "next"]


@pytest.mark.parametrize("winner", ["payment-success", "payment-failure"])
def test_a_list_of_types_returns_the_first_event_of_any(workflows_env, winner):
    loser = {"payment-success": "payment-failure", "payment-failure": "payment-success"}[winner]
    instance = start("race")
    workflows_env.run_until_idle()
    assert row(instance).waiting_for == ["payment-success", "payment-failure"]
    instance.send_event(type=winner, payload={"n": 1})
    workflows_env.run_until_idle()
    instance_status = instance.status()
    assert instance_status["output"] == {"type": winner, "payload": {"n": 1}}
    with pytest.raises(InvalidTransition, match="complete"):
        instance.send_event(type=loser, payload={})


def test_race_with_both_buffered_takes_the_oldest(workflows_env):
    instance = start("race")
    instance.send_event(type="payment-failure", payload="first")
    workflows_env.clock.advance(timedelta(milliseconds=1))
    instance.send_event(type="payment-success", payload="second")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"type": "payment-failure", "payload": "first"}


def test_race_times_out_after_4_hours(workflows_env):
    instance = start("race")
    workflows_env.run_until_idle()
    workflows_env.advance("4 hours")
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"


def test_an_event_arriving_after_the_deadline_does_not_count(workflows_env):
    instance = start("approval")
    workflows_env.run_until_idle()
    # The deadline passes before any replay runs; the late event stays in the inbox.
    workflows_env.clock.advance(timedelta(hours=73))
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"status": "expired"}


@pytest.fixture
def committing_env(transactional_db):
    """The recording executor and the manual clock, each statement committing: another thread sees it."""
    from django_workflows.testing import run_workflows

    with run_workflows() as env:
        yield env


def test_an_event_received_by_the_deadline_and_committed_as_the_wait_times_out_is_taken(committing_env):
    import threading

    from django.db import connection, connections, transaction

    instance = start("approval")
    committing_env.run_until_idle()
    deadline = row(instance).wake_at
    committing_env.clock.set(deadline)

    def send():
        try:
            instance.send_event(type="manager-approval", payload={"outcome": "approved"})
        finally:
            connections.close_all()

    def sent_from_another_thread():
        thread = threading.Thread(target=send)
        thread.start()
        thread.join()

    sent = []

    def once_the_inbox_was_read(execute, sql, params, many, context):
        # The replay woken by the deadline found the inbox empty; a request sends the event at the deadline
        # (received by it), and commits before the replay journals the timeout.
        if not sent and Event._meta.db_table in sql and sql.lstrip().upper().startswith("SELECT"):
            sent.append(sql)
            transaction.on_commit(sent_from_another_thread)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(once_the_inbox_was_read):
        committing_env.run_until_idle()
    assert sent
    event = Event.objects.get(instance_id=instance.pk)
    assert event.received_at == deadline
    assert instance.status()["output"]["status"] == "approved"
    assert event.consumed_by.key == "approval-1"


def test_timeout_is_catchable_and_journaled(workflows_env):
    instance = start("swallows-everything")
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    workflows_env.advance("1 hour")
    assert instance.status()["output"] == "timed out"
    assert calls["swallowed"] == 0


@pytest.mark.parametrize(
    "event_type, payload, error",
    [
        ("bad type", {}, "Invalid event type"),
        ("", {}, "Invalid event type"),
        ("x" * 101, {}, "Invalid event type"),
        ("ok", {"big": "x" * (1024 * 1024)}, "over the limit of 1048576 bytes"),
        ("ok", {"obj": object()}, "is not JSON-serializable"),
    ],
)
def test_bad_events_are_refused_and_change_nothing(workflows_env, event_type, payload, error):
    instance = start("approval")
    workflows_env.run_until_idle()
    with pytest.raises(InvalidEvent, match=error):
        instance.send_event(type=event_type, payload=payload)
    assert not Event.objects.exists()


@pytest.mark.one_flavour("stores an event for an instance that is never replayed")
def test_event_types_of_100_characters_are_accepted(workflows_env):
    instance = start("approval")
    instance.send_event(type="t" * 100, payload=None)
    assert Event.objects.get().type == "t" * 100


def test_events_to_finished_instances_are_refused(workflows_env):
    instance = start("three-steps")
    workflows_env.run_until_idle()
    with pytest.raises(InvalidTransition, match="it is complete"):
        instance.send_event(type="late", payload={})
    assert not Event.objects.exists()
