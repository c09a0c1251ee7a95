"""Cloudflare's Python SDK forms, as ported code writes them: ``@step.do()`` named after its function,
dependencies passed in by parameter name, the step context, ``event["payload"]``, a retry delay that is
a function of the attempt, and waits that do not count toward the step limit."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from django_workflows import StepContext, WorkflowEntrypoint, workflows
from django_workflows.errors import InvalidStepInput
from django_workflows.models import Step
from django_workflows.shared.definition import registry

ran = Counter()
seen: list = []


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()
    seen.clear()


class DecoratedSteps(WorkflowEntrypoint):
    name = "sdk-decorated"

    def run(self, event, step):
        @step.do()
        def dep_1():
            ran["dep_1"] += 1
            return "one"

        @step.do()
        def dep_2():
            ran["dep_2"] += 1
            return "two"

        @step.do("final", depends=[dep_1], concurrent=True)
        def final_step(dep_1, dep_2, ctx):
            ran["final"] += 1
            seen.append(ctx)
            return f"{dep_1} {dep_2} {event['payload']['suffix']}"

        first = dep_1()
        step.sleep("pause", "1 minute")
        return {"first": first, "final": final_step(), "id": event["instanceId"]}


def test_decorated_steps_are_named_after_their_functions_and_get_dependencies_by_name(workflows_env):
    instance = workflows.get("sdk-decorated").create(id="d1", params={"suffix": "!"})
    workflows_env.run_until_idle()
    workflows_env.advance("1 minute")
    assert instance.status()["output"] == {"first": "one", "final": "one two !", "id": "d1"}
    keys = list(Step.objects.order_by("id").values_list("key", flat=True))
    # dep_1 ran once, before the sleep: the dependency reused its result; dep_2 ran for final.
    assert keys == ["dep_1-1", "pause-1", "dep_2-1", "final-1"]
    assert ran == {"dep_1": 1, "dep_2": 1, "final": 1}
    (ctx,) = seen
    assert isinstance(ctx, StepContext)
    assert (ctx.step.name, ctx.step.count, ctx.attempt) == ("final", 1, 1)
    assert ctx.config["retries"]["limit"] == 5 and ctx.config["timeout"] == 600_000


class ContextOnRetry(WorkflowEntrypoint):
    name = "sdk-context-retry"

    def run(self, event, step):
        def flaky(ctx):
            seen.append((ctx.step.name, ctx.step.count, ctx.attempt))
            if ctx.attempt < 3:
                raise RuntimeError("not yet")
            return ctx.attempt

        step.do("flaky", flaky, config={"retries": {"limit": 3, "delay": lambda attempt: f"{attempt} seconds"}})
        return step.do("flaky", flaky, config={"retries": {"limit": 3, "delay": 0}})


def test_the_context_counts_attempts_and_calls_and_a_delay_may_be_a_function_of_the_attempt(workflows_env):
    instance = workflows.get("sdk-context-retry").create()
    workflows_env.run_until_idle()
    first = Step.objects.get(key="flaky-1")
    # After attempt 1 failed, the delay function said 1 second.
    assert first.status == "retrying"
    assert (first.wake_at - datetime.fromisoformat(first.attempts[-1]["end"])).total_seconds() == 1
    assert first.config["retries"]["delay"] == "<lambda>(attempt)"
    workflows_env.advance("1 second")
    first.refresh_from_db()
    assert (first.wake_at - datetime.fromisoformat(first.attempts[-1]["end"])).total_seconds() == 2
    workflows_env.advance("2 seconds")
    assert instance.status()["output"] == 3
    assert seen == [("flaky", 1, 1), ("flaky", 1, 2), ("flaky", 1, 3),
                    ("flaky", 2, 1), ("flaky", 2, 2), ("flaky", 2, 3)]


class WaitsDoNotCount(WorkflowEntrypoint):
    name = "sdk-waits-uncounted"
    step_limit = 2

    def run(self, event, step):
        step.do("a", lambda: "a")
        first = step.wait_for_event("first", "go", timeout="1 hour")
        second = step.wait_for_event("second", "go", timeout="1 hour")
        step.do("b", lambda: "b")
        return [first.payload, second.payload]


def test_waits_for_events_do_not_count_toward_the_step_limit(workflows_env):
    instance = workflows.get("sdk-waits-uncounted").create()
    workflows_env.run_until_idle()
    for n in (1, 2):
        instance.send_event(type="go", payload=n)
        workflows_env.run_until_idle()
    assert instance.status() == {"status": "complete", "output": [1, 2], "error": None}


@pytest.mark.one_flavour("reads a WorkflowEvent built by hand: no workflow runs")
def test_the_event_reads_as_cloudflare_s_python_sdk_reads_it(workflows_env):
    from django_workflows.shared.definition import WorkflowEvent

    event = WorkflowEvent(payload={"a": 1}, timestamp=None, instance_id="i", workflow_name="w")
    assert event["payload"] == {"a": 1} and event["instanceId"] == "i" and event["workflowName"] == "w"
    assert event.get("missing", 7) == 7 and "payload" in event
    with pytest.raises(KeyError, match="an event has 'payload'"):
        event["params"]


class Misdeclared(WorkflowEntrypoint):
    name = "sdk-misdeclared"

    def run(self, event, step):
        return step.do()(lambda: 1)


def test_a_lambda_declared_without_a_name_is_refused_with_what_to_write(workflows_env):
    instance = workflows.get("sdk-misdeclared").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "InvalidStepInput" and "@step.do('name')" in error["message"]
    assert issubclass(InvalidStepInput, ValueError)


class Sensitive(WorkflowEntrypoint):
    name = "sdk-sensitive"

    def run(self, event, step):
        token = step.do("tokenize card", lambda: {"token": "tok_secret_4242"}, config={"sensitive": "output"})
        return step.do("charge", lambda: {"charged_with": token["token"][-4:]})


def test_a_sensitive_output_is_journaled_for_the_replays_and_shown_nowhere(workflows_env, admin_client):
    from django.core.management import call_command

    instance = workflows.get("sdk-sensitive").create(id="s1")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"charged_with": "4242"}
    assert Step.objects.get(key="tokenize card-1").result == {"token": "tok_secret_4242"}
    api = admin_client.get("/workflows/sdk-sensitive/instances/s1/").json()
    (tokenize,) = [s for s in api["steps"] if s["name"] == "tokenize card"]
    assert tokenize["output"] == "[redacted: sensitive output]" and tokenize["config"]["sensitive"] == "output"
    page = admin_client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert "tok_secret" not in page and "sensitive output" in page
    import io

    out = io.StringIO()
    call_command("workflows", "instances", "describe", "sdk-sensitive", "s1", "--json", stdout=out)
    assert "tok_secret" not in out.getvalue() and "redacted" in out.getvalue()


def test_sensitive_takes_only_output(workflows_env):
    class Wrong(WorkflowEntrypoint):
        name = "sdk-sensitive-wrong"

        def run(self, event, step):
            step.do("x", lambda: 1, config={"sensitive": True})

    try:
        instance = workflows.get("sdk-sensitive-wrong").create()
        workflows_env.run_until_idle()
        assert "sensitive must be 'output', got True" in instance.status()["error"]["message"]
    finally:
        # Left registered, the class would be a workflow of every later test (one without its permissions).
        registry.unregister(Wrong)
