"""step.all: steps side by side, with keys and a journal order that do not depend on which finishes
first, journaled answers not run again, the first failure in the list raised after the others were
journaled, and a retry's delay suspending the instance; in def run and in async def run."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.models import Step
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
        return f"{name} {threading.current_thread().name.startswith('django-workflows-step')}"

    return body


def plan(event):
    # The first finishes last: the journal must follow the list, not the finishing order.
    return [("a", together("a", 0.3)), ("b", together("b", 0.1)), ("c", together("c", 0))]


class SideBySide(WorkflowEntrypoint):
    name = "side-by-side"

    def run(self, event, step):
        before = step.do("before", lambda: "before")
        results = step.all(plan(event))
        return [before, *results]


class SideBySideAsync(WorkflowEntrypoint):
    name = "side-by-side-async"

    async def run(self, event, step):
        before = await step.do("before", lambda: "before")
        results = await step.all(plan(event))
        return [before, *results]


@pytest.mark.parametrize("workflow", ["side-by-side", "side-by-side-async"])
def test_the_bodies_run_at_once_and_the_journal_follows_the_list(workflows_env, workflow):
    instance = workflows.get(workflow).create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["before", "a True", "b True", "c True"]
    keys = list(Step.objects.order_by("id").values_list("key", flat=True))
    assert keys == ["before-1", "a-1", "b-1", "c-1"]
    ended = dict(Step.objects.values_list("key", "ended_at"))
    # Written in the list's order, though c finished first and a last.
    assert ended["a-1"] <= ended["b-1"] <= ended["c-1"]
    assert ran == {"a": 1, "b": 1, "c": 1}


def test_a_crash_while_they_run_runs_them_again_and_the_result_is_the_same(workflows_env):
    crash_once.add("b")
    instance = workflows.get("side-by-side").create()
    with pytest.raises(SimulatedCrash):
        workflows_env.run_until_idle()
    assert list(Step.objects.values_list("key", flat=True)) == ["before-1"]
    workflows_env.clock.advance(timedelta(minutes=2))
    sweep()
    barrier.reset()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["before", "a True", "b True", "c True"]
    assert ran == {"a": 2, "b": 2, "c": 2}


class Mixed(WorkflowEntrypoint):
    name = "side-by-side-mixed"

    def run(self, event, step):
        def flaky():
            ran["flaky"] += 1
            if ran["flaky"] < 2:
                raise RuntimeError("not yet")
            return "flaky ok"

        def broken():
            ran["broken"] += 1
            raise ValueError("broken for good")

        def count(name):
            return lambda: ran.update([name]) or name

        first = step.all([("one", count("one")), ("flaky", flaky, {"retries": {"limit": 2, "delay": "1 minute"}}),
                          ("two", count("two"))])
        try:
            step.all([("three", count("three")), ("broken", broken, {"retries": {"limit": 0}}),
                      ("four", count("four"))])
        except ValueError as exc:
            return [first, str(exc)]


def test_a_retry_delay_suspends_and_a_failure_is_raised_after_the_others_were_journaled(workflows_env):
    instance = workflows.get("side-by-side-mixed").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    assert dict(Step.objects.values_list("key", "status")) == {
        "one-1": "succeeded", "flaky-1": "retrying", "two-1": "succeeded"}
    workflows_env.advance("1 minute")
    assert instance.status()["output"] == [["one", "flaky ok", "two"], "broken for good"]
    assert ran == {"one": 1, "two": 1, "flaky": 2, "three": 1, "broken": 1, "four": 1}
    statuses = dict(Step.objects.values_list("key", "status"))
    assert statuses["three-1"] == statuses["four-1"] == "succeeded" and statuses["broken-1"] == "failed"


def test_step_all_takes_pairs_or_triples(workflows_env):
    class Wrong(WorkflowEntrypoint):
        name = "side-by-side-wrong"

        def run(self, event, step):
            step.all([lambda: 1])

    instance = workflows.get("side-by-side-wrong").create()
    workflows_env.run_until_idle()
    assert "each item is (name, fn) or (name, fn, config)" in instance.status()["error"]["message"]


class ConcurrentDependencies(WorkflowEntrypoint):
    """The Python SDK's DAG: concurrent=True resolves the dependencies side by side."""

    name = "side-by-side-dag"

    async def run(self, event, step):
        @step.do()
        def a():
            return together("a", 0.3)()

        @step.do()
        def b():
            return together("b", 0.1)()

        @step.do()
        def c():
            return together("c", 0)()

        @step.do(concurrent=True)
        def final(a, b, c):
            return [a, b, c]

        return await final()


def test_concurrent_dependencies_run_side_by_side(workflows_env):
    instance = workflows.get("side-by-side-dag").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["a True", "b True", "c True"]
    assert list(Step.objects.order_by("id").values_list("key", flat=True)) == ["a-1", "b-1", "c-1", "final-1"]
