"""Cloudflare's Python Workflows SDK: ``step.do`` in its forms, ``depends`` and ``concurrent``, the step
context, ``event``, sleeps, waits for events, retries and their defaults, and errors as ``run()`` catches
them. Each workflow is written as Cloudflare's documentation (developers.cloudflare.com/workflows/python/)
and its SDK's tests write it; only the import line is ours."""

from __future__ import annotations

import datetime

import pytest

from django_workflows import workflows
from django_workflows.cloudflare import NonRetryableError, WorkflowEntrypoint
from django_workflows.models import Step

attempts: list = []


@pytest.fixture(autouse=True)
def _reset():
    attempts.clear()


class DecoratorStep(WorkflowEntrypoint):
    name = "cf-decorator"

    def run(self, event, step):
        @step.do("my first step")
        def my_first_step():
            return "Hello World!"

        return my_first_step()


def test_step_do_is_a_decorator_and_the_call_runs_the_step(run_to_end):
    assert run_to_end("cf-decorator")["output"] == "Hello World!"
    assert list(Step.objects.values_list("name", flat=True)) == ["my first step"]


class DagWorkflow(WorkflowEntrypoint):
    name = "cf-dag"

    def run(self, event, step):
        @step.do("dependency a")
        def step_a():
            return 10

        @step.do("dependency b")
        def step_b():
            return 20

        @step.do("my final step", depends=[step_a, step_b], concurrent=True)
        def my_final_step(result_a=0, result_b=0):
            return result_a + result_b

        return my_final_step()


def test_depends_passes_the_results_positionally_in_the_order_of_depends(run_to_end):
    # docs: workflows/python/dag: "should return 30", whatever the parameters are called.
    assert run_to_end("cf-dag")["output"] == 30
    assert list(Step.objects.order_by("id").values_list("name", flat=True)) == [
        "dependency a", "dependency b", "my final step"]


class DependsOrder(WorkflowEntrypoint):
    name = "cf-depends-order"

    def run(self, event, step):
        @step.do("first")
        def first():
            return "a"

        @step.do("second")
        def second():
            return "b"

        @step.do("joined", depends=[second, first])
        def joined(x, y):
            return x + y

        return joined()


def test_depends_results_follow_the_list_s_order_not_the_declarations(run_to_end):
    assert run_to_end("cf-depends-order")["output"] == "ba"


class ImplicitDependencies(WorkflowEntrypoint):
    name = "cf-implicit-deps"

    def run(self, event, step):
        @step.do()
        def base_value():
            return 10

        @step.do()
        def derived(base_value):
            return base_value + 5

        @step.do("dup")
        def first():
            return 1

        @step.do("dup")
        def second():
            return 2

        # A parameter names a step: by its step name, the latest of that name.
        @step.do()
        def uses(dup):
            return dup * 10

        return {"derived": derived(), "both": [first(), second()], "uses": uses()}


def test_a_parameter_named_after_a_step_receives_its_result(run_to_end):
    assert run_to_end("cf-implicit-deps")["output"] == {"derived": 15, "both": [1, 2], "uses": 20}


class ConcurrentImplicit(WorkflowEntrypoint):
    name = "cf-concurrent"

    def run(self, event, step):
        @step.do()
        def left():
            return 2

        @step.do()
        def right():
            return 3

        @step.do(concurrent=True)
        def combined(left, right):
            return left * right

        return {"combined": combined()}


def test_concurrent_resolves_the_dependencies_side_by_side(run_to_end):
    assert run_to_end("cf-concurrent")["output"] == {"combined": 6}
    assert list(Step.objects.order_by("id").values_list("name", flat=True)) == ["left", "right", "combined"]


class ReadsContext(WorkflowEntrypoint):
    name = "cf-ctx"

    def run(self, event, step):
        @step.do("ctx-step")
        def read_ctx(ctx):
            return {
                "step_name": ctx["step"]["name"],
                "step_count": ctx["step"]["count"],
                "attempt": int(ctx["attempt"]),
                "has_config": "config" in ctx,
                "retries": ctx["config"]["retries"]["limit"],
                "by_attribute": [ctx.step.name, ctx.attempt],
            }

        return read_ctx()


def test_the_step_context_reads_as_a_mapping(run_to_end):
    assert run_to_end("cf-ctx")["output"] == {"step_name": "ctx-step", "step_count": 1, "attempt": 1,
                                              "has_config": True, "retries": 5, "by_attribute": ["ctx-step", 1]}


class ReadsEvent(WorkflowEntrypoint):
    name = "cf-event"

    def run(self, event, step):
        return {
            "payload": event["payload"],
            "has_timestamp": "timestamp" in event,
            "instance_id": event.get("instanceId"),
            "workflow_name": event.get("workflowName"),
        }


def test_event_is_a_dictionary_of_payload_timestamp_instance_id_and_workflow_name(run_to_end):
    assert run_to_end("cf-event", params={"a": 1}, id="e-1")["output"] == {
        "payload": {"a": 1}, "has_timestamp": True, "instance_id": "e-1", "workflow_name": "cf-event"}


class Sleeps(WorkflowEntrypoint):
    name = "cf-sleeps"

    def run(self, event, step):
        step.sleep("my-sleep-step", "10 seconds")
        step.sleep("in seconds", 5)
        step.sleep_until("until a datetime", datetime.datetime.fromisoformat(event["payload"]["at"]))
        step.sleep_until("until epoch seconds", event["payload"]["epoch"])
        return "awake"


def test_sleep_and_sleep_until_hold_no_worker_and_end(workflows_env):
    from django_workflows.shared import clock

    now = clock.now()
    at = now + datetime.timedelta(hours=2)
    instance = workflows.get("cf-sleeps").create(params={
        "at": at.isoformat(), "epoch": (at + datetime.timedelta(hours=1)).timestamp()})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("15 seconds")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("2 hours")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status()["output"] == "awake"


class WaitsForApproval(WorkflowEntrypoint):
    name = "cf-wait"

    def run(self, event, step):
        received = step.wait_for_event("await-approval", "approval")
        return {"event_payload": received["payload"], "type": received["type"]}


def test_wait_for_event_returns_the_event_read_as_a_mapping(workflows_env):
    instance = workflows.get("cf-wait").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    instance.send_event(type="approval", payload={"ok": True})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"event_payload": {"ok": True}, "type": "approval"}


def test_wait_for_event_times_out_after_24_hours_by_default(workflows_env):
    instance = workflows.get("cf-wait").create()
    workflows_env.run_until_idle()
    workflows_env.advance("23 hours")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    status = instance.status()
    assert status["status"] == "errored" and status["error"]["name"] == "WorkflowTimeoutError"


class Flaky(WorkflowEntrypoint):
    name = "cf-retry"

    def run(self, event, step):
        @step.do("retry-step", config={"retries": {"limit": 1, "delay": 0, "backoff": "constant"}})
        def flaky(ctx):
            if int(ctx["attempt"]) < 2:
                raise ValueError("transient failure")
            return {"succeeded_on_attempt": int(ctx["attempt"])}

        return flaky()


def test_a_step_is_retried_per_its_config(run_to_end):
    assert run_to_end("cf-retry")["output"] == {"succeeded_on_attempt": 2}


class AlwaysFails(WorkflowEntrypoint):
    name = "cf-default-retries"

    def run(self, event, step):
        @step.do("fails")
        def fails(ctx):
            attempts.append(ctx["config"])
            raise RuntimeError("down")

        return fails()


def test_the_default_retry_policy_is_five_retries_10_seconds_exponential_and_a_10_minute_timeout(run_to_end):
    status = run_to_end("cf-default-retries")
    assert status["status"] == "errored"
    assert status["error"] == {"name": "RuntimeError", "message": "down"}
    assert len(attempts) == 6
    assert attempts[0]["retries"] == {"limit": 5, "delay": 10_000, "backoff": "exponential"}
    assert attempts[0]["timeout"] == 600_000
    (journaled,) = Step.objects.filter(name="fails")
    starts = [datetime.datetime.fromisoformat(a["start"]) for a in journaled.attempts]
    ends = [datetime.datetime.fromisoformat(a["end"]) for a in journaled.attempts]
    gaps = [round((start - end).total_seconds()) for start, end in zip(starts[1:], ends)]
    # Ran at the next hour's advance at the latest: each gap is at least the backoff's.
    assert all(gap >= want for gap, want in zip(gaps, [10, 20, 40, 80, 160]))


class NonRetryable(WorkflowEntrypoint):
    name = "cf-non-retryable"

    def run(self, event, step):
        @step.do("non-retryable-step", config={"retries": {"limit": 3, "delay": 0, "backoff": "constant"}})
        def boom(ctx):
            if int(ctx["attempt"]) < 2:
                raise NonRetryableError("do not retry")
            return {"retried": True, "attempt": int(ctx["attempt"])}

        try:
            result = boom()
        except NonRetryableError as exc:
            return {"retried": False, "caught": "NonRetryableError", "message": str(exc)}
        except Exception as exc:
            return {"retried": False, "caught": type(exc).__name__, "message": str(exc)}
        return result


def test_non_retryable_error_fails_the_step_at_once_and_is_caught_as_itself(run_to_end):
    assert run_to_end("cf-non-retryable")["output"] == {
        "retried": False, "caught": "NonRetryableError", "message": "do not retry"}


class ErrorPath(WorkflowEntrypoint):
    name = "cf-error-path"

    def run(self, event, step):
        results = {}

        @step.do("non_retryable_no_message")
        def non_retryable_no_message():
            raise NonRetryableError()

        try:
            non_retryable_no_message()
        except NonRetryableError as e:
            results["non_retryable_no_message"] = {"caught": "NonRetryableError", "message": str(e),
                                                   "args": list(e.args)}
        except Exception as e:
            results["non_retryable_no_message"] = {"caught": type(e).__name__, "message": str(e)}

        @step.do("type_error")
        def type_error():
            raise TypeError("intentional type error")

        try:
            type_error()
        except TypeError as e:
            results["type_error"] = {"caught": "TypeError", "message": str(e)}
        except Exception as e:
            results["type_error"] = {"caught": type(e).__name__, "message": str(e)}

        @step.do("key_error", config={"retries": {"limit": 0}})
        def key_error():
            return {}["sku"]

        try:
            key_error()
        except KeyError as e:
            results["key_error"] = {"caught": "KeyError", "args": list(e.args)}
        return results


def test_an_ordinary_exception_reaches_run_as_its_own_type_after_its_retries(run_to_end):
    assert run_to_end("cf-error-path")["output"] == {
        "non_retryable_no_message": {"caught": "NonRetryableError", "message": "", "args": []},
        "type_error": {"caught": "TypeError", "message": "intentional type error"},
        # Rebuilt from its arguments, not its message ("'sku'"): the same error run() would have met.
        "key_error": {"caught": "KeyError", "args": ["sku"]},
    }
    assert Step.objects.get(name="type_error").attempts[-1]["attempt"] == 6


class StepTimesOut(WorkflowEntrypoint):
    name = "cf-timeout"

    def run(self, event, step):
        @step.do("slow", config={"retries": {"limit": 0}, "timeout": "100 milliseconds"})
        def slow():
            import time

            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pass
            return "finished"

        try:
            return slow()
        except Exception as exc:
            return {"caught": type(exc).__name__}


def test_a_step_attempt_past_its_timeout_fails(run_to_end):
    assert run_to_end("cf-timeout")["output"] == {"caught": "StepTimeoutError"}
