"""Deadlines: ``timeout`` on a workflow class (or ``create(timeout=...)``) fixes a deadline when the
instance is created; past it the instance ends errored with ``WorkflowTimeoutError``, after the undos of
its steps that declared one, whatever it waits on. Fired by the worker's own wake-up code (the test
clock drives ``store.dispatch.wake_due``), with no sweep of its own."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_workflows import WorkflowEntrypoint, WorkflowTimeoutError, workflows
from django_workflows.shared.definition import OPTIONS_ATTRIBUTE, registry
from django_workflows.errors import InvalidParams
from django_workflows.models import Instance, Step
from django_workflows.shared.options import WorkflowOptions
from django_workflows.engine.replay import replay
from django_workflows.store import leases
from django_workflows.store.dispatch import next_wake_time, wake_due

ran: list[str] = []
undone: list[tuple[str, str]] = []
running: dict = {}


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()
    undone.clear()


class WeekLong(WorkflowEntrypoint):
    """Waits for an approval for up to 30 days, but the instance has 7."""

    name = "deadline-week"
    timeout = "7 days"

    def run(self, event, step):
        step.do("ask", lambda: ran.append("ask"))
        step.wait_for_event("approval", "approval", timeout="30 days")
        step.do("after", lambda: ran.append("after"))
        return "approved"


class Sleepy(WorkflowEntrypoint):
    name = "deadline-sleepy"
    timeout = "1 day"

    def run(self, event, step):
        step.sleep("nap", (event.payload or {}).get("nap", "30 days"))
        return "rested"


def always_fails():
    ran.append("attempt")
    raise RuntimeError("the provider is down")


class Retrying(WorkflowEntrypoint):
    name = "deadline-retrying"
    timeout = "1 hour"

    def run(self, event, step):
        step.do("flaky", always_fails, config={"retries": {"limit": 10, "delay": "20 minutes", "backoff": "constant"}})
        return "done"


class Booking(WorkflowEntrypoint):
    """A step with an undo succeeds, then the instance waits past its deadline."""

    name = "deadline-booking"
    timeout = "2 hours"

    def run(self, event, step):
        step.do("reserve", lambda: {"seat": "12A"},
                config={"rollback": lambda output, error: undone.append((output["seat"], type(error).__name__))})
        step.wait_for_event("payment", "payment", timeout="1 day")
        return "booked"


class Kid(WorkflowEntrypoint):
    name = "deadline-kid"
    timeout = "1 hour"

    def run(self, event, step):
        step.sleep("forever", "30 days")
        return "grown"


class Parent(WorkflowEntrypoint):
    name = "deadline-parent"

    def run(self, event, step):
        try:
            return step.child("kid", "deadline-kid")
        except WorkflowTimeoutError as exc:
            return {"child timed out": type(exc).__name__}


def slow_body():
    """Takes 11 minutes, by the test clock that running["env"] holds."""
    running["env"].clock.advance(timedelta(minutes=11))
    ran.append("slow")


class SlowSteps(WorkflowEntrypoint):
    """Its first step's body takes the clock past the deadline: the next step never runs."""

    name = "deadline-slow-steps"
    timeout = "10 minutes"

    def run(self, event, step):
        step.do("slow", slow_body)
        step.do("second", lambda: ran.append("second"))
        return "done"


class NoDeadline(WorkflowEntrypoint):
    name = "deadline-none"

    def run(self, event, step):
        step.sleep("nap", "30 days")
        return "rested"


def _row(handle) -> Instance:
    return Instance.objects.get(pk=handle.pk)


def test_a_seven_day_deadline_fires_with_the_test_clock(workflows_env):
    instance = workflows.get("deadline-week").create(id="week")
    created = _row(instance).created_at
    workflows_env.run_until_idle()
    row = _row(instance)
    assert (row.status, row.timeout, row.deadline) == ("waiting", timedelta(days=7), created + timedelta(days=7))
    # The wait's own wake time is 30 days off; the instance's is its deadline, which the wake-up loop reads.
    assert row.wake_at == row.deadline == next_wake_time()
    workflows_env.advance("167 hours")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "WorkflowTimeoutError"
    assert "its timeout of 1 week" in status["error"]["message"]
    assert "approval-1" in status["error"]["message"]  # the step it was stopped at
    assert "rollback" not in status  # nothing declared an undo
    assert _row(instance).ended_at == created + timedelta(days=7)
    assert ran == ["ask"]


def test_a_scheduled_instance_s_deadline_counts_from_its_start(workflows_env):
    # Started a day after its creation, it has its whole week from then: the day it was scheduled is
    # not the instance's to use.
    instance = workflows.get("deadline-week").create(id="later", start_in="1 day")
    created = _row(instance).created_at
    row = _row(instance)
    assert (row.status, row.wake_at, row.deadline) == ("scheduled", created + timedelta(days=1),
                                                       created + timedelta(days=8))
    workflows_env.advance("1 day")
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("167 hours")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"


def test_an_event_before_the_deadline_lets_the_instance_finish(workflows_env):
    instance = workflows.get("deadline-week").create()
    workflows_env.run_until_idle()
    workflows_env.advance("3 days")
    instance.send_event(type="approval")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "approved"
    assert _row(instance).wake_at is None


def test_the_deadline_fires_during_a_sleep(workflows_env):
    instance = workflows.get("deadline-sleepy").create()
    workflows_env.run_until_idle()
    workflows_env.advance("1 day")
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"
    # A sleep shorter than the deadline wakes at its own time.
    short = workflows.get("deadline-sleepy").create(params={"nap": "1 hour"})
    workflows_env.run_until_idle()
    assert _row(short).wake_at == workflows_env.now + timedelta(hours=1)
    workflows_env.advance("1 hour")
    assert short.status()["output"] == "rested"


def test_the_deadline_fires_during_a_retrys_backoff(workflows_env):
    instance = workflows.get("deadline-retrying").create()
    workflows_env.advance("3 hours")
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"
    # Attempts at 0, 20 and 40 minutes; the one due at 60 minutes is the deadline's.
    assert ran == ["attempt"] * 3
    assert Step.objects.get(instance_id=instance.pk).status == "retrying"


def test_a_timed_out_instance_rolls_back_what_declared_an_undo(workflows_env):
    instance = workflows.get("deadline-booking").create()
    workflows_env.advance("2 hours")
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "WorkflowTimeoutError"
    assert status["rollback"] == {"outcome": "complete", "error": None}
    assert undone == [("12A", "WorkflowTimeoutError")]
    assert Step.objects.filter(instance_id=instance.pk, name="rollback reserve", status="succeeded").exists()


def test_a_childs_timeout_is_caught_by_name_in_its_parent(workflows_env):
    parent = workflows.get("deadline-parent").create()
    workflows_env.advance("1 hour")
    assert parent.status()["output"] == {"child timed out": "WorkflowTimeoutError"}
    child = Instance.objects.get(workflow_name="deadline-kid")
    assert (child.status, child.timeout) == ("errored", timedelta(hours=1))


def test_a_paused_instance_times_out_when_resumed_past_its_deadline(workflows_env):
    instance = workflows.get("deadline-week").create()
    workflows_env.run_until_idle()
    instance.pause()
    workflows_env.advance("10 days")
    # Paused, nothing runs: the deadline waits for the resume.
    assert instance.status()["status"] == "paused"
    instance.resume()
    workflows_env.run_until_idle()
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"
    assert ran == ["ask"]


def test_a_queued_instance_past_its_deadline_never_runs_a_step(workflows_env):
    instance = workflows.get("deadline-week").create()
    workflows_env.clock.advance(timedelta(days=8))
    workflows_env.run_until_idle()
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"
    assert ran == []
    assert not Step.objects.filter(instance_id=instance.pk).exists()


def test_a_deadline_passing_while_a_replay_runs_stops_it_at_the_next_step(workflows_env):
    running["env"] = workflows_env
    instance = workflows.get("deadline-slow-steps").create()
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["error"]["name"] == "WorkflowTimeoutError"
    assert "second-1" in status["error"]["message"]
    assert ran == ["slow"]


def test_create_timeout_overrides_the_class_and_bad_ones_create_nothing(workflows_env):
    short = workflows.get("deadline-week").create(timeout="1 hour")
    assert _row(short).timeout == timedelta(hours=1)
    free = workflows.get("deadline-none").create(timeout=5000)
    assert _row(free).deadline == _row(free).created_at + timedelta(seconds=5)
    assert _row(workflows.get("deadline-none").create()).deadline is None
    for bad, said in ((0, "more than zero"), ("soon", "cannot parse"), ("4000 days", "at most 3650 days"),
                      (True, "expected milliseconds"), ([1], "expected milliseconds")):
        with pytest.raises(InvalidParams, match=said):
            workflows.get("deadline-week").create(id="bad", timeout=bad)
        with pytest.raises(InvalidParams, match=said):
            workflows.get("deadline-week").create_batch([{"id": "bad-batch", "timeout": bad}])
    # Exactly the refused ids: the instances above have random hex ids, one in 4,096 of which starts "bad".
    assert not Instance.objects.filter(instance_id__in=["bad", "bad-batch"]).exists()
    batch = workflows.get("deadline-none").create_batch([{"id": "b1", "timeout": "2 days"}, {"id": "b2"}])
    assert [_row(h).timeout for h in batch] == [timedelta(days=2), None]
    workflows_env.advance("1 hour")
    assert short.status()["error"]["name"] == "WorkflowTimeoutError"


def test_a_deploy_that_changes_the_timeout_moves_no_running_deadline(workflows_env, monkeypatch):
    instance = workflows.get("deadline-week").create()
    workflows_env.run_until_idle()
    deadline = _row(instance).deadline
    deployed = registry.get("deadline-week")  # the class itself, or its async twin
    monkeypatch.setattr(deployed, "timeout", "1 hour")
    monkeypatch.delattr(deployed, OPTIONS_ATTRIBUTE)
    assert WorkflowOptions.of(deployed).timeout == timedelta(hours=1)
    workflows_env.advance("2 hours")
    assert instance.status()["status"] == "waiting"
    assert _row(instance).deadline == deadline
    newer = workflows.get("deadline-week").create()
    assert _row(newer).timeout == timedelta(hours=1)


def test_a_restart_measures_the_timeout_again_from_the_restart(workflows_env):
    instance = workflows.get("deadline-sleepy").create()
    workflows_env.advance("1 day")
    assert instance.status()["status"] == "errored"
    workflows_env.advance("5 hours")
    instance.restart()
    assert _row(instance).deadline == workflows_env.now + timedelta(days=1)
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("23 hours")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status()["error"]["name"] == "WorkflowTimeoutError"


def test_a_terminate_with_rollback_wins_over_a_deadline(workflows_env):
    instance = workflows.get("deadline-booking").create()
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(hours=3))
    instance.terminate(rollback=True)
    workflows_env.run_until_idle()
    status = instance.status()
    assert (status["status"], status["error"]["name"]) == ("terminated", "InstanceTerminated")
    assert undone == [("12A", "InstanceTerminated")]


# Held back by a limit: the deadline is kept as it is for every other status.

ELSEWHERE = "another-host:1:1:1"


def test_a_queued_instance_held_back_by_a_concurrency_limit_times_out_at_its_deadline(workflows_env):
    # "slotted" runs two at once (tests/testapp/workflows.py); two replays elsewhere hold both slots all day.
    running_elsewhere = [workflows.get("slotted").create(params={"n": n}) for n in range(2)]
    held = workflows.get("slotted").create(params={"n": 2}, timeout="1 hour")
    workflows_env.executor.reset()
    for handle in running_elsewhere:
        assert leases.take(handle.pk, ELSEWHERE, workflows_env.now, 86_400) is not None
    assert replay(held.pk) is False  # its delivery: at the limit, it stays queued for a slot
    deadline = _row(held).deadline
    assert (_row(held).status, _row(held).wake_at) == ("queued", deadline)
    assert next_wake_time() == deadline
    workflows_env.advance("59 minutes")
    assert _row(held).status == "queued"
    workflows_env.advance("2 minutes")  # no slot was freed meanwhile
    status = held.status()
    assert status["status"] == "errored" and status["error"]["name"] == "WorkflowTimeoutError", status
    assert (_row(held).ended_at, _row(held).wake_at) == (deadline, None)
    assert not Step.objects.filter(instance_id=held.pk).exists()
    assert [_row(handle).status for handle in running_elsewhere] == ["running", "running"]
    assert next_wake_time() is None


def test_a_held_instance_handed_a_slot_before_its_deadline_runs_and_keeps_no_wake_time(workflows_env):
    first, second = (workflows.get("slotted").create(params={"n": n}) for n in range(2))
    held = workflows.get("slotted").create(params={"n": 2}, timeout="1 hour")
    workflows_env.executor.reset()
    claims = [leases.take(handle.pk, ELSEWHERE, workflows_env.now, 86_400) for handle in (first, second)]
    assert replay(held.pk) is False and _row(held).wake_at == _row(held).deadline
    assert replay(held.pk) is False  # a second delivery, refused too, writes nothing more
    # One of the replays elsewhere gives its slot back: the held instance starts, well before its deadline.
    Instance.objects.filter(pk=claims[0].pk).update(status="complete", lease_owner="", lease_expires_at=None)
    workflows_env.advance("10 minutes")  # the sweeper's hand-on is what would queue it; here, its delivery
    assert replay(held.pk) is True
    assert held.status()["status"] == "complete"
    assert next_wake_time() is None


def test_a_rate_limited_instance_wakes_at_its_deadline_if_that_comes_before_the_window(workflows_env):
    # "rate-limited" starts three a minute: the fourth waits for the window, and its deadline comes first.
    started = [workflows.get("rate-limited").create() for _ in range(3)]
    late = workflows.get("rate-limited").create(timeout="30 seconds")
    workflows_env.run_until_idle()
    assert [_row(handle).status for handle in started] == ["waiting"] * 3  # asleep for 10 minutes
    assert (_row(late).status, _row(late).wake_at) == ("waiting", _row(late).deadline)
    workflows_env.advance("31 seconds")
    status = late.status()
    assert status["status"] == "errored" and status["error"]["name"] == "WorkflowTimeoutError", status
    assert _row(late).ended_at == _row(late).deadline


def test_the_wake_up_loop_fires_a_woken_instance_once(workflows_env):
    # An instance the loop queues loses its wake time, so the loop's next round, before its replay has
    # taken it, does not queue it again.
    sleeper = workflows.get("deadline-sleepy").create(params={"nap": "1 hour"})
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(hours=1))
    assert wake_due(workflows_env.now) == 1
    assert (_row(sleeper).status, _row(sleeper).wake_at) == ("queued", None)
    assert wake_due(workflows_env.now) == 0
    assert list(workflows_env.executor.queue) == [sleeper.pk]
