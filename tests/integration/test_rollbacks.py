"""Rollbacks: a failed run() undoes its steps last first, each undo a durable step with its own retries,
and the instance's error says how the rollback went; in both of Cloudflare's forms."""

from __future__ import annotations

from collections import Counter

import pytest

from django_workflows import NonRetryableError, WorkflowEntrypoint, workflows
from django_workflows.models import Step

undone: list = []
ran = Counter()


@pytest.fixture(autouse=True)
def _reset():
    undone.clear()
    ran.clear()


class Saga(WorkflowEntrypoint):
    """The TypeScript form: the undo and its config in the step's config."""

    name = "rollback-saga"

    def run(self, event, step):
        def release(output, error, ctx):
            undone.append(("release", output, str(error), ctx.step.name))

        def refund(output):
            ran["refund"] += 1
            if ran["refund"] <= (event.payload or {}).get("refund_failures", 0):
                raise RuntimeError("the provider is down")
            undone.append(("refund", output))

        step.do("reserve", lambda: {"sku": "tea"}, config={"rollback": release})
        step.do("charge", lambda: {"charge": 120}, config={
            "rollback": refund,
            "rollback_config": {"retries": {"limit": (event.payload or {}).get("refund_retries", 2), "delay": "1 minute",
                                            "backoff": "constant"}},
        })
        step.do("plain", lambda: "no undo")
        step.do("ship", self.ship, config={"retries": {"limit": 0}})

    def ship(self):
        raise NonRetryableError("the carrier refused the parcel")


def test_a_failed_run_undoes_its_steps_last_first_and_says_so(workflows_env):
    instance = workflows.get("rollback-saga").create()
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "NonRetryableError"
    assert status["error"]["rollback"] == {"status": "complete", "undone": 2}
    assert undone == [("refund", {"charge": 120}),
                      ("release", {"sku": "tea"}, "the carrier refused the parcel", "reserve")]
    keys = list(Step.objects.order_by("id").values_list("key", flat=True))
    assert keys == ["reserve-1", "charge-1", "plain-1", "ship-1", "rollback charge-1", "rollback reserve-1"]


def test_an_undo_retries_durably_and_the_replay_goes_on_with_the_rest(workflows_env):
    instance = workflows.get("rollback-saga").create(params={"refund_failures": 2})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    assert Step.objects.get(key="rollback charge-1").status == "retrying"
    workflows_env.advance("1 minute")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 minute")
    status = instance.status()
    assert status["status"] == "errored" and status["error"]["rollback"] == {"status": "complete", "undone": 2}
    assert ran["refund"] == 3
    assert [u[0] for u in undone] == ["refund", "release"]


def test_an_undo_that_fails_for_good_stops_the_rollback_and_is_named(workflows_env):
    instance = workflows.get("rollback-saga").create(params={"refund_failures": 9, "refund_retries": 0})
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "NonRetryableError"
    assert error["rollback"] == {"status": "failed", "undone": 0, "step": "rollback charge",
                                 "error": {"name": "RuntimeError", "message": "the provider is down"}}
    assert undone == []


class PythonSaga(WorkflowEntrypoint):
    """The Python SDK's form: with_rollback, .undo, and rollback_all called by run() itself."""

    name = "rollback-python"

    def run(self, event, step):
        @step.with_rollback("book flight")
        def book_flight():
            return {"flight": "LH1"}

        @book_flight.undo
        def cancel_flight(output, error):
            undone.append(("cancel", output["flight"], str(error)))

        book_flight()
        try:
            step.do("book hotel", self.no_rooms, config={"retries": {"limit": 0}})
        except RuntimeError as error:
            step.rollback_all(error)
            return "rolled back"

    def no_rooms(self):
        raise RuntimeError("no rooms")


def test_the_python_form_rolls_back_when_run_asks(workflows_env):
    instance = workflows.get("rollback-python").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "rolled back"
    assert undone == [("cancel", "LH1", "no rooms")]
    assert Step.objects.filter(key="rollback book flight-1", status="succeeded").exists()


class Caught(WorkflowEntrypoint):
    name = "rollback-caught"

    def run(self, event, step):
        step.do("reserve", lambda: 1, config={"rollback": lambda: undone.append("released")})
        try:
            step.do("fail", self.fail, config={"retries": {"limit": 0}})
        except RuntimeError:
            return "handled"

    def fail(self):
        raise RuntimeError("boom")


def test_a_failure_run_handles_rolls_nothing_back(workflows_env):
    instance = workflows.get("rollback-caught").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "handled" and undone == []


def test_a_rollback_that_is_not_a_function_is_a_clear_error(workflows_env):
    class BadRollback(WorkflowEntrypoint):
        name = "rollback-bad"

        def run(self, event, step):
            step.do("reserve", lambda: 1, config={"rollback": "release"})

    instance = workflows.get("rollback-bad").create()
    workflows_env.run_until_idle()
    assert "'rollback' must be a function" in instance.status()["error"]["message"]


class Trip(WorkflowEntrypoint):
    """Books, then waits for the traveller's confirmation: the moment an operator terminates it."""

    name = "rollback-trip"

    def run(self, event, step):
        def cancel(output, error):
            ran["cancel"] += 1
            if ran["cancel"] <= (event.payload or {}).get("cancel_failures", 0):
                raise RuntimeError("the airline is down")
            undone.append((output, type(error).__name__))

        step.do("book", lambda: "LH1", config={
            "rollback": cancel, "rollback_config": {"retries": {"limit": 3, "delay": "1 minute"}}})
        step.do("no undo", lambda: "x")
        step.wait_for_event("confirm", "confirmed", timeout="1 day")
        return "confirmed"


def test_terminate_with_rollback_runs_the_undos_then_terminates(workflows_env):
    from django.core.management import call_command

    instance = workflows.get("rollback-trip").create(id="t1")
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    call_command("workflows", "instances", "terminate", "rollback-trip", "t1", "--rollback")
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "terminated"
    assert status["error"]["name"] == "InstanceTerminated"
    assert status["error"]["rollback"] == {"status": "complete", "undone": 1}
    assert undone == [("LH1", "InstanceTerminated")]
    keys = list(Step.objects.order_by("id").values_list("key", flat=True))
    assert keys == ["book-1", "no undo-1", "confirm-1", "rollback book-1"]
    # Nothing more happens: the wait is over, an event is refused.
    with pytest.raises(Exception, match="terminated"):
        instance.send_event(type="confirmed")


def test_an_undo_of_a_terminate_that_must_retry_waits_and_ends_terminated(workflows_env, admin_client):
    instance = workflows.get("rollback-trip").create(id="t2", params={"cancel_failures": 1})
    workflows_env.run_until_idle()
    response = admin_client.patch("/workflows/rollback-trip/instances/t2/status/",
                                  {"status": "terminate", "rollback": True}, content_type="application/json")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 minute")
    assert instance.status()["status"] == "terminated" and ran["cancel"] == 2
    assert undone == [("LH1", "InstanceTerminated")]


def test_rollback_belongs_to_terminate_alone(workflows_env, admin_client):
    instance = workflows.get("rollback-trip").create(id="t3")
    workflows_env.run_until_idle()
    response = admin_client.patch("/workflows/rollback-trip/instances/t3/status/",
                                  {"status": "pause", "rollback": True}, content_type="application/json")
    assert response.status_code == 400 and "rollback" in response.json()["error"]["fields"]
    assert instance.status()["status"] == "waiting"


def test_the_admin_terminates_with_rollback(workflows_env, admin_client):
    instance = workflows.get("rollback-trip").create(id="t4")
    workflows_env.run_until_idle()
    page = admin_client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert "Terminate and roll back" in page and 'name="rollback" value="1"' in page
    response = admin_client.post(f"/admin/django_workflows/instance/{instance.pk}/steer/terminate/",
                                 {"rollback": "1"}, follow=True)
    assert "queued to roll back, then terminate" in response.content.decode()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "terminated" and undone == [("LH1", "InstanceTerminated")]
    page = admin_client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert "Terminate and roll back" not in page and "&quot;undone&quot;: 1" in page
