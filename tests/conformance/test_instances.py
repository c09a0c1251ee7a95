"""What a Cloudflare user steers an instance with, through the REST API and the CLI as the binding and
wrangler offer it (workflows/build/workers-api, wrangler-commands): ``status()`` with its error as
``{name, message}`` and its ``rollback`` as ``{outcome, error}``, ``terminate({rollback})``,
``restart({from})``, events sent before the wait (kept, then delivered oldest first, once) and the retry
gaps of the three backoffs. The workflows are written as Cloudflare's Python SDK writes them; only the
import line is ours."""

from __future__ import annotations

import datetime
import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.cloudflare import WorkflowEntrypoint
from django_workflows.models import Step

ran: list = []


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


@pytest.fixture
def api(workflows_env):
    client = APIClient()
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def cli(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


class Booking(WorkflowEntrypoint):
    """Two steps with undos, then a wait for a person: failed (or terminated with rollback) from there, it
    rolls back, as Cloudflare rolls back an instance that fails after steps with undos."""
    name = "cf-booking"

    def run(self, event, step):
        @step.with_rollback("reserve seat")
        def reserve():
            return {"seat": "12A"}

        @reserve.undo
        def release(error, value):
            ran.append(f"release {value['seat']}")

        @step.with_rollback("charge card")
        def charge():
            return {"charge": "ch_1"}

        @charge.undo
        def refund(error, value):
            ran.append(f"refund {value['charge']}")
            if event["payload"].get("refund_fails"):
                raise RuntimeError("the provider refused the refund")

        reserve()
        charge()
        decision = step.wait_for_event("confirm", "confirmation", timeout="1 hour")
        if decision["payload"]["ok"] is not True:
            raise ValueError("not confirmed")
        return "booked"


def test_status_reports_the_error_as_name_and_message_and_the_rollback_as_outcome_and_error(api, workflows_env):
    instance = workflows.get("cf-booking").create(id="b1", params={})
    workflows_env.run_until_idle()
    instance.send_event(type="confirmation", payload={"ok": False})
    workflows_env.run_until_idle()

    status = instance.status()
    assert status == {"status": "errored", "output": None,
                      "error": {"name": "ValueError", "message": "not confirmed",
                                "rollback": {"status": "complete", "undone": 2}},
                      "rollback": {"outcome": "complete", "error": None}}
    assert ran == ["refund ch_1", "release 12A"]
    body = api.get("/workflows/cf-booking/instances/b1/").json()
    assert body["status"] == "errored"
    assert {key: body["error"][key] for key in ("name", "message")} == {"name": "ValueError",
                                                                        "message": "not confirmed"}
    assert body["rollback"] == {"outcome": "complete", "error": None}
    assert "Rollback      complete" in cli("instances", "describe", "cf-booking", "b1").replace(":", "")


def test_a_rollback_whose_undo_fails_reports_outcome_errored_with_the_undo_s_error(api, workflows_env):
    instance = workflows.get("cf-booking").create(id="b2", params={"refund_fails": True})
    workflows_env.run_until_idle()
    instance.send_event(type="confirmation", payload={"ok": False})
    for _ in range(10):
        workflows_env.advance("1 hour")

    status = instance.status()
    assert status["status"] == "errored"
    assert status["rollback"] == {"outcome": "errored", "error": {"name": "RuntimeError",
                                                                  "message": "the provider refused the refund"}}
    # The first undo that fails stops the rollback: the seat is not released.
    assert "release 12A" not in ran
    assert api.get("/workflows/cf-booking/instances/b2/").json()["rollback"] == status["rollback"]


def test_an_instance_that_rolled_nothing_back_has_no_rollback(api, workflows_env):
    instance = workflows.get("cf-booking").create(id="b3", params={})
    workflows_env.run_until_idle()
    instance.send_event(type="confirmation", payload={"ok": True})
    workflows_env.run_until_idle()

    assert instance.status() == {"status": "complete", "output": "booked", "error": None}
    assert api.get("/workflows/cf-booking/instances/b3/").json()["rollback"] is None


@pytest.mark.parametrize("surface", ["api", "cli"])
def test_terminate_with_rollback_runs_the_undos_then_ends_terminated(api, workflows_env, surface):
    instance = workflows.get("cf-booking").create(id="t1", params={})
    workflows_env.run_until_idle()
    if surface == "api":
        response = api.patch("/workflows/cf-booking/instances/t1/status/", {"status": "terminate", "rollback": True},
                             format="json")
        assert response.status_code == 200, response.content
    else:
        cli("instances", "terminate", "cf-booking", "t1", "--rollback")
    workflows_env.run_until_idle()

    status = instance.status()
    assert status["status"] == "terminated"
    assert status["error"]["name"] == "InstanceTerminated"
    assert status["rollback"] == {"outcome": "complete", "error": None}
    assert ran == ["refund ch_1", "release 12A"]


def test_terminate_without_rollback_runs_no_undo(workflows_env):
    instance = workflows.get("cf-booking").create(id="t2", params={})
    workflows_env.run_until_idle()
    instance.terminate()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "terminated"
    assert "rollback" not in instance.status()
    assert ran == []


class Counter(WorkflowEntrypoint):
    name = "cf-counter"

    def run(self, event, step):
        total = 0
        for i in range(3):
            @step.do("tick")
            def tick():
                ran.append(i)
                return i

            total += tick()
        return total


def test_restart_from_a_step_and_count_runs_again_from_that_occurrence(api, workflows_env):
    instance = workflows.get("cf-counter").create(id="r1")
    workflows_env.run_until_idle()
    assert ran == [0, 1, 2]
    ran.clear()

    response = api.patch("/workflows/cf-counter/instances/r1/status/",
                         {"status": "restart", "from": {"name": "tick", "count": 2}}, format="json")
    assert response.status_code == 200, response.content
    workflows_env.run_until_idle()

    assert instance.status()["output"] == 3
    # The first tick's journaled result stands; the second and third run again.
    assert ran == [1, 2]


def test_restart_from_the_top_runs_every_step_again(api, workflows_env):
    instance = workflows.get("cf-counter").create(id="r2")
    workflows_env.run_until_idle()
    ran.clear()
    assert api.patch("/workflows/cf-counter/instances/r2/status/", {"status": "restart"}, format="json").status_code == 200
    workflows_env.run_until_idle()
    assert ran == [0, 1, 2]
    assert instance.status()["status"] == "complete"


class TwoWaits(WorkflowEntrypoint):
    name = "cf-two-waits"

    def run(self, event, step):
        step.sleep("before the waits", "1 minute")
        first = step.wait_for_event("first", "update", timeout="1 hour")
        second = step.wait_for_event("second", "update", timeout="1 hour")
        return [first["payload"], second["payload"]]


def test_events_sent_before_the_wait_are_kept_and_delivered_oldest_first_once(api, workflows_env):
    instance = workflows.get("cf-two-waits").create(id="e1")
    workflows_env.run_until_idle()
    for n in (1, 2, 3):
        response = api.post("/workflows/cf-two-waits/instances/e1/events/update/", {"n": n}, format="json")
        assert response.status_code == 202, response.content
    workflows_env.advance("1 minute")

    assert instance.status() == {"status": "complete", "output": [{"n": 1}, {"n": 2}], "error": None}
    events = api.get("/workflows/cf-two-waits/instances/e1/").json()["events"]
    assert [(e["payload"], e["consumed_by"]) for e in events] == [
        ({"n": 1}, "first-1"), ({"n": 2}, "second-1"), ({"n": 3}, None)]


class Flaky(WorkflowEntrypoint):
    """Fails its first three attempts, 300 ms apart per the subclass's backoff."""
    name = "cf-gaps-constant"
    backoff = "constant"

    def run(self, event, step):
        @step.do("flaky", config={"retries": {"limit": 3, "delay": 300, "backoff": self.backoff}})
        def flaky(ctx):
            if ctx["attempt"] < 4:
                raise RuntimeError("not yet")
            return ctx["attempt"]

        return flaky()


class FlakyLinear(Flaky):
    name = "cf-gaps-linear"
    backoff = "linear"


class FlakyExponential(Flaky):
    name = "cf-gaps-exponential"
    backoff = "exponential"


@pytest.mark.parametrize("backoff, gaps", [("constant", [300, 300, 300]), ("linear", [300, 600, 900]),
                                           ("exponential", [300, 600, 1200])])
def test_retry_gaps_follow_the_backoff(workflows_env, backoff, gaps):
    instance = workflows.get(f"cf-gaps-{backoff}").create()
    workflows_env.run_until_idle()
    workflows_env.advance("5 seconds")

    assert instance.status()["output"] == 4
    (journaled,) = Step.objects.filter(name="flaky")
    starts = [datetime.datetime.fromisoformat(a["start"]) for a in journaled.attempts]
    ends = [datetime.datetime.fromisoformat(a["end"]) for a in journaled.attempts]
    assert [round((start - end).total_seconds() * 1000) for start, end in zip(starts[1:], ends)] == gaps
