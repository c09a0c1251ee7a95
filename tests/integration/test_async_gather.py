"""asyncio in an async run(): gather runs step bodies side by side with keys and a journal in the order
they were called; asyncio.wait races a wait against a sleep or a step, and every replay is won by the
step that won the first time (each journal row remembers the round it reached run() in)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.errors import WorkflowTimeoutError
from django_workflows.models import Instance, Step
from django_workflows.store.dispatch import sweep
from tests.testapp.workflows import SimulatedCrash

ran = Counter()
barrier = threading.Barrier(3, timeout=10)
crash_once: set = set()


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()
    barrier.reset()
    crash_once.clear()


def together(name, pause):
    """A body that can finish only if the two others run at the same time (they meet at a barrier)."""
    def body():
        ran[name] += 1
        if ran[name] == 1:
            barrier.wait()
        if name in crash_once:
            crash_once.discard(name)
            raise SimulatedCrash()
        time.sleep(pause)
        return name

    return body


def journal():
    return list(Step.objects.order_by("id").values_list("key", "status", "settled_in"))


class Gathered(WorkflowEntrypoint):
    name = "gathered"

    async def run(self, event, step):
        before = await step.do("before", lambda: "before")
        # The first finishes last: the journal must follow the calls, not the finishing order.
        results = await asyncio.gather(step.do("a", together("a", 0.3)), step.do("b", together("b", 0.1)),
                                       step.do("c", together("c", 0)))
        await step.sleep("settle", "1 minute")
        return [before, *results, await step.do("after", lambda: ran.update(["after"]) or "after")]


def test_gathered_bodies_run_at_once_and_the_journal_follows_the_calls(workflows_env):
    instance = workflows.get("gathered").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    # One round each: before, then the three together, then the sleep.
    assert journal() == [("before-1", "succeeded", 0), ("a-1", "succeeded", 1), ("b-1", "succeeded", 1),
                         ("c-1", "succeeded", 1), ("settle-1", "waiting", 2)]
    ended = dict(Step.objects.values_list("key", "ended_at"))
    assert ended["a-1"] <= ended["b-1"] <= ended["c-1"]
    workflows_env.advance("1 minute")
    assert instance.status()["output"] == ["before", "a", "b", "c", "after"]
    # The replay after the sleep took the three from the journal.
    assert ran == {"a": 1, "b": 1, "c": 1, "after": 1}


def test_a_crash_during_a_gather_runs_the_unjournaled_bodies_again(workflows_env):
    crash_once.add("b")
    instance = workflows.get("gathered").create()
    with pytest.raises(SimulatedCrash):
        workflows_env.run_until_idle()
    assert [key for key, _, _ in journal()] == ["before-1"]
    workflows_env.clock.advance(timedelta(minutes=2))
    sweep()
    barrier.reset()
    workflows_env.run_until_idle()
    workflows_env.advance("1 minute")
    assert instance.status()["output"] == ["before", "a", "b", "c", "after"]
    assert ran == {"a": 2, "b": 2, "c": 2, "after": 1}
    assert [key for key, _, _ in journal()] == ["before-1", "a-1", "b-1", "c-1", "settle-1", "after-1"]


class GatheredFailure(WorkflowEntrypoint):
    name = "gathered-failure"

    async def run(self, event, step):
        def broken(name):
            def body():
                ran[name] += 1
                raise ValueError(f"{name} broke")
            return body

        calls = [step.do("one", lambda: ran.update(["one"]) or 1),
                 step.do("two", broken("two"), config={"retries": {"limit": 0}}),
                 step.do("three", broken("three"), config={"retries": {"limit": 0}})]
        try:
            await asyncio.gather(*calls)
        except ValueError as exc:
            first = str(exc)
        settled = await asyncio.gather(*calls, return_exceptions=True)
        return [first, [str(value) for value in settled]]


def test_a_gather_raises_the_first_failure_in_call_order_after_journaling_every_step(workflows_env):
    instance = workflows.get("gathered-failure").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["two broke", ["1", "two broke", "three broke"]]
    assert dict(Step.objects.values_list("key", "status")) == {
        "one-1": "succeeded", "two-1": "failed", "three-1": "failed"}
    assert ran == {"one": 1, "two": 1, "three": 1}


class ApprovalRace(WorkflowEntrypoint):
    """Promise.race of a wait and a sleep: nudge the approver after an hour, and go on waiting."""

    name = "approval-race"

    async def run(self, event, step):
        approval = step.wait_for_event("approval", "approved", timeout="1 day")
        reminder = step.sleep("reminder", "1 hour")
        done, _ = await asyncio.wait([approval, reminder], return_when=asyncio.FIRST_COMPLETED)
        if reminder in done:
            first = await step.do("nudge", lambda: ran.update(["nudge"]) or "nudged")
        else:
            first = await step.do("record", lambda: ran.update(["record"]) or "approved early")
        approved = await approval
        await reminder  # both ways, nothing closes before the hour is over
        closed = await step.wait_for_event("closed", "closed", timeout="7 days")
        return [first, approved.payload, closed.payload]


def test_the_event_wins_the_race_on_every_replay_after_the_sleep_is_over(workflows_env):
    instance = workflows.get("approval-race").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("30 minutes")
    instance.send_event(type="approved", payload="yes")
    workflows_env.run_until_idle()
    assert ran == {"record": 1}
    workflows_env.advance("31 minutes")  # the reminder is over: it is journaled, after the approval
    statuses = dict(Step.objects.values_list("key", "status"))
    assert statuses == {"approval-1": "succeeded", "reminder-1": "succeeded", "record-1": "succeeded",
                        "closed-1": "waiting"}
    # The replay that takes "closed" finds both the approval and the reminder journaled: the approval
    # reached run() alone, in an earlier round, so it wins again.
    instance.send_event(type="closed", payload="done")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["approved early", "yes", "done"]
    assert ran == {"record": 1}
    rounds = dict(Step.objects.values_list("key", "settled_in"))
    assert rounds["approval-1"] < rounds["reminder-1"]


def test_the_sleep_wins_the_race_when_the_hour_passes_first(workflows_env):
    instance = workflows.get("approval-race").create()
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    assert ran == {"nudge": 1}
    assert instance.status()["status"] == "waiting"
    instance.send_event(type="approved", payload="late")
    workflows_env.run_until_idle()
    instance.send_event(type="closed", payload="done")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["nudged", "late", "done"]
    assert ran == {"nudge": 1}


def test_a_race_suspends_until_the_earliest_wake_time_and_wakes_on_the_event(workflows_env):
    instance = workflows.get("approval-race").create()
    workflows_env.run_until_idle()
    row = Instance.objects.get(pk=instance.pk)
    assert row.status == "waiting" and row.waiting_for == ["approved"]
    assert row.wake_at == workflows_env.now + timedelta(hours=1)


class StepAgainstCancel(WorkflowEntrypoint):
    """Promise.race of a step and a wait: the step wins unless the cancellation is already in."""

    name = "step-against-cancel"

    async def run(self, event, step):
        check = step.do("check", lambda: ran.update(["check"]) or "checked")
        cancel = step.wait_for_event("cancel", "cancel", timeout="1 hour")
        done, pending = await asyncio.wait([check, cancel], return_when=asyncio.FIRST_COMPLETED)
        for loser in pending:
            loser.cancel()
        winner = done.pop()
        return winner.result() if winner is check else "cancelled"


def test_a_step_raced_against_a_wait_wins_and_the_wait_is_left(workflows_env):
    instance = workflows.get("step-against-cancel").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "checked"
    assert dict(Step.objects.values_list("key", "status")) == {"check-1": "succeeded", "cancel-1": "waiting"}


class TimedOutRace(WorkflowEntrypoint):
    name = "timed-out-race"

    async def run(self, event, step):
        try:
            await asyncio.gather(step.wait_for_event("a", "a", timeout="1 minute"),
                                 step.wait_for_event("b", "b", timeout="2 minutes"))
        except WorkflowTimeoutError as exc:
            return str(exc)


def test_waits_gathered_time_out_each_on_its_own_deadline(workflows_env):
    instance = workflows.get("timed-out-race").create()
    workflows_env.run_until_idle()
    instance.send_event(type="b", payload=None)
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 minute")
    assert "no event of type 'a' arrived within" in instance.status()["output"]


class TimerInRun(WorkflowEntrypoint):
    name = "timer-in-run"

    async def run(self, event, step):
        await asyncio.sleep(0)  # a turn of the loop is not a timer
        first = await step.do("first", lambda: 1)
        await asyncio.wait_for(step.do("second", lambda: 2), timeout=5)
        return first


def test_a_timer_in_run_is_refused_but_a_turn_of_the_loop_is_not(workflows_env):
    instance = workflows.get("timer-in-run").create()
    workflows_env.run_until_idle()
    state = instance.status()
    # wait_for's timer is never needed: the step settles in the round before it could fire.
    assert state["status"] == "complete" and state["output"] == 1
