"""``async def run``: the same journal, keys and guarantees as ``def run``, side by side, including the
decorator forms, async step functions, retries, sleeps, events and rollbacks."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.models import Step

ran = Counter()


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


def flaky():
    ran["flaky"] += 1
    if ran["flaky"] < 2:
        raise RuntimeError("once")
    return ran["flaky"]


class SyncShape(WorkflowEntrypoint):
    name = "shape-sync"

    def run(self, event, step):
        @step.do()
        def reserve():
            return {"sku": event["payload"]["sku"]}

        first = reserve()
        retried = step.do("flaky", flaky, config={"retries": {"limit": 2, "delay": "1 second"}})
        step.sleep("settle", "1 minute")
        approval = step.wait_for_event("approval", "approved", timeout="1 hour")
        return [first, retried, approval.payload, step.do("ship", lambda: "shipped")]


class AsyncShape(WorkflowEntrypoint):
    name = "shape-async"

    async def run(self, event, step):
        @step.do()
        async def reserve():
            await asyncio.sleep(0)          # a step function may await: it runs in its own loop
            return {"sku": event["payload"]["sku"]}

        first = await reserve()
        retried = await step.do("flaky", flaky, config={"retries": {"limit": 2, "delay": "1 second"}})
        await step.sleep("settle", "1 minute")
        approval = await step.wait_for_event("approval", "approved", timeout="1 hour")
        return [first, retried, approval.payload, await step.do("ship", lambda: "shipped")]


def drive_to_the_end(env, name):
    instance = workflows.get(name).create(id=name, params={"sku": "tea"})
    env.run_until_idle()
    env.advance("1 second")
    env.advance("1 minute")
    instance.send_event(type="approved", payload="ok")
    env.run_until_idle()
    return instance


def journal(instance):
    rows = Step.objects.filter(instance_id=instance.pk).order_by("id").values_list("key", "kind", "status", "result")
    # The event's arrival time differs between the two runs; everything else must not.
    return [(key, kind, status, {k: v for k, v in result.items() if k != "timestamp"}
             if isinstance(result, dict) else result) for key, kind, status, result in rows]


def test_an_async_run_journals_exactly_what_a_sync_run_journals(workflows_env):
    sync = drive_to_the_end(workflows_env, "shape-sync")
    sync_runs = ran["flaky"]
    ran.clear()
    asynchronous = drive_to_the_end(workflows_env, "shape-async")
    assert sync.status() == asynchronous.status() == {
        "status": "complete", "output": [{"sku": "tea"}, 2, "ok", "shipped"], "error": None}
    assert journal(sync) == journal(asynchronous)
    assert sync_runs == ran["flaky"] == 2


class AsyncSaga(WorkflowEntrypoint):
    name = "saga-async"

    async def run(self, event, step):
        await step.do("charge", lambda: {"id": "ch_1"},
                      config={"rollback": lambda output: ran.update([f"refund {output['id']}"])})
        await step.do("ship", self.fail, config={"retries": {"limit": 0}})

    def fail(self):
        raise RuntimeError("no carrier")


def test_an_async_run_rolls_back_when_it_fails(workflows_env):
    instance = workflows.get("saga-async").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "RuntimeError" and error["rollback"] == {"status": "complete", "undone": 1}
    assert ran["refund ch_1"] == 1


class AwaitsTheLoop(WorkflowEntrypoint):
    name = "awaits-the-loop"

    async def run(self, event, step):
        await step.do("first", lambda: 1)
        await asyncio.sleep(1)
        await step.do("second", lambda: 2)


def test_awaiting_anything_but_a_step_in_run_is_a_clear_error(workflows_env):
    instance = workflows.get("awaits-the-loop").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "WorkflowConfigError"
    assert "that is not a step" in error["message"] and "inside a step" in error["message"]
    assert list(Step.objects.values_list("key", flat=True)) == ["first-1"]
