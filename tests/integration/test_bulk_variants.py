"""Bulk steering's variants: a restart from a step (``from_step``, ``count``) and a terminate with rollback,
through the API's ``instances/bulk/``, the command line's ``--where`` and the admin's actions, each through
``bulk_steering`` (the transitions table, the tenancy hook, the audit log)."""

from __future__ import annotations

import io
import json
import logging

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Step
from tests.tenancy import SETTINGS, make_tenants

BULK = "/workflows/reserves/instances/bulk/"
undone: list[str] = []
marked: list[str] = []


class Reserves(WorkflowEntrypoint):
    name = "reserves"

    def run(self, event, step):
        @step.with_rollback("reserve")
        def reserve():
            return event.instance_id

        @reserve.undo
        def release(error, value):
            undone.append(value)

        reserve()
        step.do("mark", lambda: marked.append(event.instance_id) or len(marked))
        step.wait_for_event("go", "go", timeout="1 hour")


registry.unregister(Reserves)


@pytest.fixture
def waiting(workflows_env):
    registry.register(Reserves)
    undone.clear()
    marked.clear()
    for n in range(3):
        workflows.get("reserves").create(id=f"r{n}")
    workflows.get("approval").create(id="other", params={})
    workflows_env.run_until_idle()
    marked.clear()
    yield workflows_env
    registry.unregister(Reserves)


def statuses() -> dict[str, str]:
    return dict(Instance.objects.values_list("instance_id", "status"))


def root() -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw")


def root_api() -> APIClient:
    client = APIClient()
    client.force_authenticate(root())
    return client


def run(*args) -> str:
    out = io.StringIO()
    call_command("workflows", "instances", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def reserve_rows() -> dict[str, int]:
    return dict(Step.objects.filter(name="reserve").values_list("instance__instance_id", "pk"))


def test_the_api_restarts_from_a_step_keeping_the_steps_before_it(waiting, caplog):
    before = reserve_rows()
    with caplog.at_level(logging.INFO, logger="django_workflows.audit"):
        answer = root_api().post(BULK, {"action": "restart", "from_step": "mark", "where": {"id": ["r0", "r1"]}},
                                 format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"action": "restart", "from_step": "mark", "from_step_count": 1, "dry_run": False,
                             "count": 2, "ids": ["r0", "r1"], "refused": [], "more": False}
    assert [r.getMessage() for r in caplog.records] == ["Restarted from step 'mark' #1 reserves/r0 by api:root",
                                                        "Restarted from step 'mark' #1 reserves/r1 by api:root"]
    assert caplog.records[0].from_step == "mark"
    waiting.run_until_idle()
    # The step before it was kept, the step itself ran again, only for the two selected.
    assert reserve_rows() == before and sorted(marked) == ["r0", "r1"]
    assert statuses()["r2"] == "waiting"


def test_a_restart_from_a_step_selects_only_instances_whose_journal_holds_it(waiting):
    client = root_api()
    answer = client.post(BULK, {"action": "restart", "from_step": "mark", "count": 2,
                                "where": {"status": "waiting"}, "dry_run": True}, format="json").json()
    assert (answer["count"], answer["ids"]) == (0, [])
    answer = client.post(BULK, {"action": "restart", "from_step": "mark", "where": {"status": "waiting"},
                                    "dry_run": True}, format="json").json()
    assert answer["ids"] == ["r0", "r1", "r2"] and not marked


def test_the_api_terminates_with_rollback(waiting, caplog):
    with caplog.at_level(logging.INFO, logger="django_workflows.audit"):
        answer = root_api().post(BULK, {"action": "terminate", "rollback": True, "where": {"id": "r1"}},
                                 format="json").json()
    assert (answer["rollback"], answer["ids"]) == (True, ["r1"])
    assert caplog.records[0].getMessage() == "Queued to roll back, then terminate reserves/r1 by api:root"
    waiting.run_until_idle()
    assert undone == ["r1"]
    assert statuses() == {"r0": "waiting", "r1": "terminated", "r2": "waiting", "other": "waiting"}


@pytest.mark.parametrize(("body", "message"), [
    ({"action": "pause", "from_step": "mark"}, "from_step belongs to restart, not pause"),
    ({"action": "restart", "rollback": True}, "rollback belongs to terminate, not restart"),
    ({"action": "restart", "count": 2}, "give from_step too"),
    ({"action": "restart", "from_step": "bad\nname"}, "may not hold control characters"),
    ({"action": "restart", "from_step": "\ud800"}, "Surrogate characters are not allowed"),
])
def test_a_variant_of_another_change_is_refused_and_changes_nothing(waiting, body, message):
    # As JSON text, escaped: a lone surrogate is sent as "\\ud800", as a client would.
    answer = root_api().post(BULK, json.dumps({**body, "where": {"status": "waiting"}}),
                             content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert message in json.dumps(answer.json()["error"]), answer.json()
    assert set(statuses().values()) == {"waiting"}


def test_the_command_line_restarts_from_a_step_and_terminates_with_rollback(waiting):
    text = run("terminate", "--where", "id=r0", "--rollback", "--dry-run")
    assert text.startswith("Would terminate 1 instance, rolling back first: reserves/r0")
    assert statuses()["r0"] == "waiting"
    text = run("restart", "reserves", "--where", "status=waiting", "--from-step", "mark")
    assert text.startswith("Restarted 3 instances from step 'mark' #1: reserves/r0, reserves/r1, reserves/r2")
    waiting.run_until_idle()
    assert sorted(marked) == ["r0", "r1", "r2"]
    text = run("terminate", "--where", "id=r0,r2", "--rollback")
    assert text.startswith("Terminated 2 instances, rolling back first")
    waiting.run_until_idle()
    assert sorted(undone) == ["r0", "r2"]


def test_the_admins_actions_restart_from_a_step_and_terminate_with_rollback(waiting):
    client = Client()
    client.force_login(root())
    pks = dict(Instance.objects.values_list("instance_id", "pk"))
    answer = client.post("/admin/django_workflows/instance/", {
        "action": "restart_from_step_selected", "_selected_action": [pks["r0"]], "from_step": "", "count": ""},
        follow=True)
    assert "type the name of the step to restart from" in str(list(get_messages(answer.wsgi_request))[0])
    assert not LogEntry.objects.exists()

    client.post("/admin/django_workflows/instance/", {
        "action": "restart_from_step_selected", "_selected_action": [pks["r0"], pks["other"]], "from_step": "mark",
        "count": "1"})
    waiting.run_until_idle()
    assert marked == ["r0"]
    # "other" has no step "mark": refused with the handle's message, and not logged.
    assert list(LogEntry.objects.values_list("object_repr", "change_message")) == [
        ("reserves/r0", "Restarted from step 'mark' #1 from the list.")]

    client.post("/admin/django_workflows/instance/", {
        "action": "terminate_and_roll_back_selected", "_selected_action": [pks["r1"]], "from_step": "", "count": ""})
    waiting.run_until_idle()
    assert undone == ["r1"] and statuses()["r1"] == "terminated"


def test_each_tenant_restarts_from_a_step_only_their_own(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = SETTINGS
    members = make_tenants()
    for tenant in ("a", "b"):
        workflows.get("approval").create(id=f"{tenant}0", params={"tenant": tenant})
    workflows_env.run_until_idle()
    client = APIClient()
    client.force_authenticate(members["a"])
    answer = client.post("/workflows/approval/instances/bulk/", {
        "action": "restart", "from_step": "ask", "where": {"status": "waiting"}}, format="json").json()
    assert answer["ids"] == ["a0"]
    text = run("terminate", "--where", "status=waiting", "--rollback", "--user", "member-b")
    assert text.startswith("Terminated 1 instance, rolling back first: approval/b0")


def test_a_step_name_that_is_not_text_is_refused_on_the_command_line(waiting):
    # A command line's bytes that are not UTF-8 reach Python as lone surrogates.
    with pytest.raises(CommandError, match="is not text: no step has that name"):
        run("restart", "--where", "status=waiting", "--from-step", "\udcff")
    assert set(statuses().values()) == {"waiting"}
