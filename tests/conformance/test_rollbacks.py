"""Cloudflare's Python SDK's saga pattern: ``step.with_rollback``, ``@fn.undo`` (with a config of its own,
or ``undo=``), ``step.rollback_all`` and its undos called ``undo(error, value)``, last first. Workflows
written as Cloudflare's documentation (workflows/python/python-workers-api, "Rollback") and its SDK's
rollback tests write them; only the import line is ours."""

from __future__ import annotations

import pytest

from django_workflows import workflows
from django_workflows.cloudflare import WorkflowEntrypoint
from django_workflows.models import Step

executed: list = []


@pytest.fixture(autouse=True)
def _reset():
    executed.clear()


class BasicRollback(WorkflowEntrypoint):
    name = "cf-rollback-basic"

    def run(self, event, step):
        results = []

        @step.with_rollback("step_1")
        def step_1():
            results.append("do_1")
            return "value_1"

        @step_1.undo
        def undo_1(error, value):
            results.append(f"undo_1:{value}")

        @step.with_rollback("step_2")
        def step_2():
            results.append("do_2")
            return "value_2"

        @step_2.undo
        def undo_2(error, value):
            results.append(f"undo_2:{value}:{error}")

        step_1()
        step_2()
        try:
            raise ValueError("test error")
        except ValueError as e:
            step.rollback_all(e)
        return results


def test_undos_take_error_and_value_positionally_and_run_last_first(run_to_end):
    status = run_to_end("cf-rollback-basic")
    assert status["output"] == ["do_1", "do_2", "undo_2:value_2:test error", "undo_1:value_1"]
    assert list(Step.objects.order_by("id").values_list("key", flat=True)) == [
        "step_1-1", "step_2-1", "rollback step_2-1", "rollback step_1-1"]


class UndoReceivesValue(WorkflowEntrypoint):
    name = "cf-rollback-value"

    def run(self, event, step):
        received = {}

        @step.with_rollback("step_with_value")
        def step_with_value():
            return {"id": 123, "data": "important"}

        @step_with_value.undo
        def undo_step(*args, **kwargs):
            received["args"] = [args[0].args[0], args[1]]
            received["kwargs"] = sorted(kwargs)

        step_with_value()
        step.rollback_all(ValueError("the error message"))
        return received


def test_an_undo_taking_star_args_gets_error_and_value(run_to_end):
    assert run_to_end("cf-rollback-value")["output"] == {
        "args": ["the error message", {"id": 123, "data": "important"}], "kwargs": []}


class UndoWithConfig(WorkflowEntrypoint):
    name = "cf-rollback-undo-config"

    def run(self, event, step):
        @step.with_rollback("step", config={"retries": {"limit": 1, "delay": "1 second"}})
        def step_fn():
            return "done"

        @step_fn.undo(config={"retries": {"limit": 3, "delay": "1 second"}})
        def undo_fn(error, value):
            executed.append("undo")
            if len(executed) < 4:
                raise RuntimeError("not yet")
            return "undone"

        step_fn()
        step.rollback_all(Exception("trigger"))
        return {"undo": len(executed), "configs": [step_fn._config, step_fn._undo_config]}


def test_an_undo_retries_per_its_own_config(run_to_end):
    assert run_to_end("cf-rollback-undo-config")["output"] == {
        "undo": 4, "configs": [{"retries": {"limit": 1, "delay": "1 second"}},
                               {"retries": {"limit": 3, "delay": "1 second"}}]}


class UndoInheritsConfig(WorkflowEntrypoint):
    name = "cf-rollback-undo-inherits"

    def run(self, event, step):
        @step.with_rollback("step", config={"retries": {"limit": 2, "delay": "1 second"}})
        def step_fn():
            return "done"

        @step_fn.undo
        def undo_fn(error, value):
            executed.append("undo")
            raise RuntimeError("still down")

        step_fn()
        try:
            step.rollback_all(Exception("trigger"))
        except RuntimeError:
            pass
        return len(executed)


def test_an_undo_without_a_config_inherits_its_step_s(run_to_end):
    # "config - optional separate config for the undo function. If not provided, inherits from the do
    # step's config": 1 attempt + 2 retries, not the default 5.
    assert run_to_end("cf-rollback-undo-inherits")["output"] == 3


class EmptyUndoStack(WorkflowEntrypoint):
    name = "cf-rollback-empty"

    def run(self, event, step):
        @step.do("regular_step")
        def regular_step():
            return "done"

        regular_step()
        step.rollback_all(Exception("trigger"))
        return {"success": True}


def test_rollback_all_without_undos_does_nothing(run_to_end):
    assert run_to_end("cf-rollback-empty")["output"] == {"success": True}
    assert Step.objects.count() == 1


class NoUndo(WorkflowEntrypoint):
    name = "cf-rollback-no-undo"

    def run(self, event, step):
        @step.with_rollback("step_without_undo")
        def step_without_undo():
            return "value"

        try:
            step_without_undo()
            return {"error": None, "raised": False}
        except ValueError as e:
            return {"raised": True, "contains_step_name": "step_without_undo" in str(e),
                    "contains_hint": ".undo" in str(e) or "undo=" in str(e)}


def test_with_rollback_without_an_undo_is_a_value_error_naming_the_step(run_to_end):
    assert run_to_end("cf-rollback-no-undo")["output"] == {
        "raised": True, "contains_step_name": True, "contains_hint": True}
    assert not Step.objects.exists()


class UndoParameter(WorkflowEntrypoint):
    name = "cf-rollback-undo-param"

    def run(self, event, step):
        results = []

        def reusable_undo(error, value):
            results.append(f"undo:{value}")

        @step.with_rollback("step_with_undo_param", undo=reusable_undo)
        def step_with_undo_param():
            results.append("do")
            return "value_from_do"

        value = step_with_undo_param()
        results.append(f"returned:{value}")
        step.rollback_all(None)
        return {"results": results, "has_undo_handler": step_with_undo_param._undo_handler is not None}


def test_with_rollback_takes_the_undo_as_undo_and_rollback_all_takes_none(run_to_end):
    assert run_to_end("cf-rollback-undo-param")["output"] == {
        "results": ["do", "returned:value_from_do", "undo:value_from_do"], "has_undo_handler": True}


class ErrorNone(WorkflowEntrypoint):
    name = "cf-rollback-error-none"

    def run(self, event, step):
        results = []

        @step.with_rollback("step_1")
        def step_1():
            return "value"

        @step_1.undo
        def undo_1(error, value):
            results.append(f"undo_1:error={error is None}")

        step_1()
        step.rollback_all(None)
        return results


def test_rollback_all_none_gives_the_undos_error_none(run_to_end):
    assert run_to_end("cf-rollback-error-none")["output"] == ["undo_1:error=True"]


class RollbackDepends(WorkflowEntrypoint):
    name = "cf-rollback-depends"

    def run(self, event, step):
        results = []

        @step.with_rollback("step_1")
        def step_1():
            return {"id": 1, "data": "first"}

        @step_1.undo
        def _(error, value):
            results.append(f"undo_1:{value['id']}")

        @step.with_rollback("step_2", depends=[step_1])
        def step_2(step_1_result):
            results.append(f"do_2:dep={step_1_result['id']}")
            return {"id": 2, "parent": step_1_result["id"]}

        @step_2.undo
        def _(error, value):
            results.append(f"undo_2:{value['id']}")

        val_1 = step_1()
        val_2 = step_2()
        step.rollback_all(Exception("trigger"))
        return {"results": results, "step_1_value": val_1, "step_2_value": val_2}


def test_with_rollback_takes_depends_and_passes_its_results_positionally(run_to_end):
    assert run_to_end("cf-rollback-depends")["output"] == {
        "results": ["do_2:dep=1", "undo_2:2", "undo_1:1"],
        "step_1_value": {"id": 1, "data": "first"}, "step_2_value": {"id": 2, "parent": 1}}


class RollbackConcurrent(WorkflowEntrypoint):
    name = "cf-rollback-concurrent"

    def run(self, event, step):
        @step.with_rollback("dep_a")
        def dep_a():
            return "A"

        @dep_a.undo
        def _(error, value):
            executed.append(f"undo_a:{value}")

        @step.with_rollback("dep_b")
        def dep_b():
            return "B"

        @dep_b.undo
        def _(error, value):
            executed.append(f"undo_b:{value}")

        @step.with_rollback("combined", config={"retries": {"limit": 1}}, depends=[dep_a, dep_b], concurrent=True)
        def combined(a_result, b_result):
            return f"{a_result}{b_result}"

        @combined.undo
        def _(error, value):
            executed.append(f"undo_combined:{value}")

        combined_value = combined()
        step.rollback_all(Exception("trigger"))
        return combined_value


def test_with_rollback_takes_concurrent_dependencies(run_to_end):
    assert run_to_end("cf-rollback-concurrent")["output"] == "AB"
    assert executed == ["undo_combined:AB", "undo_b:B", "undo_a:A"]


class StopOnFirstFailure(WorkflowEntrypoint):
    name = "cf-rollback-stop"

    def run(self, event, step):
        @step.with_rollback("step_1")
        def step_1():
            return 1

        @step_1.undo
        def undo_1(error, value):
            executed.append("undo_1")

        @step.with_rollback("step_2")
        def step_2():
            return 2

        @step_2.undo
        def undo_2(error, value):
            executed.append("undo_2")
            raise Exception("undo_2 failed")

        @step.with_rollback("step_3")
        def step_3():
            return 3

        @step_3.undo
        def undo_3(error, value):
            executed.append("undo_3")

        step_1()
        step_2()
        step_3()
        try:
            step.rollback_all(Exception("trigger"))
        except Exception as e:
            return {"raised": type(e).__name__, "message": str(e)}
        return {"raised": None}


def test_the_first_undo_that_fails_stops_the_rollback_and_rollback_all_raises(run_to_end):
    assert run_to_end("cf-rollback-stop")["output"] == {"raised": "Exception", "message": "undo_2 failed"}
    # undo_2 ran with the default retries (1 + 5 attempts); undo_1 never ran.
    assert executed == ["undo_3"] + ["undo_2"] * 6


class ContinueOnError(WorkflowEntrypoint):
    name = "cf-rollback-continue"

    def run(self, event, step):
        @step.with_rollback("step_1")
        def step_1():
            return 1

        @step_1.undo
        def undo_1(error, value):
            executed.append("undo_1")

        @step.with_rollback("step_2", config={"retries": {"limit": 0}})
        def step_2():
            return 2

        @step_2.undo
        def undo_2(error, value):
            raise RuntimeError("undo_2 failed")

        step_1()
        step_2()
        try:
            step.rollback_all(Exception("trigger"), continue_on_error=True)
        except ExceptionGroup as group:
            return [str(e) for e in group.exceptions]


def test_continue_on_error_runs_every_undo_and_raises_an_exception_group(run_to_end):
    assert run_to_end("cf-rollback-continue")["output"] == ["undo_2 failed"]
    assert executed == ["undo_1"]


class Nested(WorkflowEntrypoint):
    name = "cf-rollback-nested"

    async def run(self, event, step):
        error_caught = {"type": None, "message": None}

        @step.with_rollback("step_1")
        async def step_1():
            return "value"

        @step_1.undo
        async def undo_1(error, value):
            try:
                await step.rollback_all(Exception("nested"))
            except RuntimeError as e:
                error_caught["type"] = "RuntimeError"
                error_caught["message"] = str(e)
            executed.append(error_caught["type"])

        await step_1()
        await step.rollback_all(Exception("trigger"))
        return executed


class NestedSync(WorkflowEntrypoint):
    name = "cf-rollback-nested-sync"

    def run(self, event, step):
        @step.with_rollback("step_1")
        def step_1():
            return "value"

        @step_1.undo
        def undo_1(error, value):
            try:
                step.rollback_all(Exception("nested"))
            except RuntimeError:
                executed.append("RuntimeError")

        step_1()
        step.rollback_all(Exception("trigger"))
        return executed


@pytest.mark.one_flavour("an undo that calls step has no twin (no await reaches it): both are written out")
@pytest.mark.parametrize("name", ["cf-rollback-nested", "cf-rollback-nested-sync"])
def test_rollback_all_from_inside_an_undo_raises_runtime_error(run_to_end, name):
    assert run_to_end(name)["output"] == ["RuntimeError"]
    assert Step.objects.filter(key="rollback step_1-1", status="succeeded").exists()


class OrderWorkflow(WorkflowEntrypoint):
    """The documentation's example: the undos run from run()'s except, and the error goes on out."""

    name = "cf-rollback-order"

    def run(self, event, step):
        try:
            @step.with_rollback("create order")
            def create_order():
                return {"id": "o-1", "total": 120}

            @create_order.undo
            def undo_create_order(err, order):
                executed.append(("delete order", order["id"], str(err)))

            order = create_order()

            @step.with_rollback("charge payment")
            def charge_payment():
                return {"id": "ch-1", "amount": order["total"]}

            @charge_payment.undo
            def undo_charge_payment(err, charge):
                executed.append(("refund", charge["id"]))

            charge_payment()

            @step.do("send confirmation", config={"retries": {"limit": 0}})
            def send_confirmation():
                raise ConnectionError("mail server unreachable")

            send_confirmation()
        except Exception as e:
            step.rollback_all(e)
            raise


def test_the_documented_order_workflow_undoes_and_errors(run_to_end):
    status = run_to_end("cf-rollback-order")
    assert status["status"] == "errored"
    assert status["error"]["name"] == "ConnectionError"
    assert executed == [("refund", "ch-1"), ("delete order", "o-1", "mail server unreachable")]
