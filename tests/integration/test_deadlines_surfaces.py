"""Deadlines and families on every surface: the API takes a timeout at create (and refuses a bad one
with a 400 that creates nothing) and shows the deadline, the error and the family's links; the CLI
triggers with --timeout and describes them; the admin's instance page links a family's members."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.models import Instance

pytestmark = pytest.mark.django_db


class Rounds(WorkflowEntrypoint):
    """Two rounds, each a member of the family; the last waits for an event it never gets."""

    name = "surface-rounds"
    timeout = "1 day"

    def run(self, event, step):
        if event.payload["round"] < 2:
            step.continue_as_new({"round": event.payload["round"] + 1})
        step.wait_for_event("never", "never", timeout="30 days")


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_api_creates_with_a_timeout_and_shows_the_deadline_and_the_timeout_error(api, workflows_env):
    base = "/workflows/surface-rounds/instances/"
    created = api.post(base, {"instance_id": "r", "params": {"round": 2}, "timeout": "2 hours"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["timeout"] == 7_200_000
    row = Instance.objects.get(instance_id="r")
    assert row.deadline == row.created_at + timedelta(hours=2)
    assert body["deadline"] is not None
    workflows_env.advance("2 hours")
    detail = api.get(f"{base}r/").json()
    assert (detail["status"], detail["error"]["name"]) == ("errored", "WorkflowTimeoutError")


@pytest.mark.parametrize("timeout", [0, "soon", "4000 days", True, {"days": 1}])
def test_the_api_refuses_a_timeout_it_cannot_take_with_a_400_and_creates_nothing(api, workflows_env, timeout):
    refused = api.post("/workflows/surface-rounds/instances/", {"instance_id": "bad", "params": {"round": 2},
                                                               "timeout": timeout}, format="json")
    assert refused.status_code == 400, refused.content
    assert "timeout" in json.dumps(refused.json())
    batch = api.post("/workflows/surface-rounds/instances/batch/",
                     [{"instance_id": "bad-2", "params": {"round": 2}, "timeout": timeout}], format="json")
    assert batch.status_code == 400, batch.content
    assert not Instance.objects.filter(workflow_name="surface-rounds").exists()


def test_the_api_cli_and_admin_show_a_familys_links(api, client, workflows_env):
    workflows.get("surface-rounds").create(id="fam", params={"round": 1})
    workflows_env.run_until_idle()
    first, second = Instance.objects.get(instance_id="fam"), Instance.objects.get(instance_id="fam~2")
    base = "/workflows/surface-rounds/instances/"
    assert (api.get(f"{base}fam/").json()["predecessor"], api.get(f"{base}fam/").json()["successor"]) == (
        None, "fam~2")
    later = api.get(f"{base}fam~2/").json()
    assert (later["predecessor"], later["successor"], later["status"]) == ("fam", None, "waiting")

    out = io.StringIO()
    call_command("workflows", "instances", "describe", "surface-rounds", "fam~2", stdout=out)
    text = out.getvalue()
    assert re.search(r"^Continues +fam$", text, re.MULTILINE), text
    assert not re.search(r"^Continued as", text, re.MULTILINE)
    assert "Deadline" in text and "timeout 1 day" in text

    client.force_login(User.objects.create_superuser("staff", "staff@example.com", "pw"))
    page = client.get(f"/admin/django_workflows/instance/{first.pk}/change/").content.decode()
    assert f'href="/admin/django_workflows/instance/{second.pk}/change/" class="dw-successor-link"' in page
    page = client.get(f"/admin/django_workflows/instance/{second.pk}/change/").content.decode()
    assert f'href="/admin/django_workflows/instance/{first.pk}/change/" class="dw-predecessor-link"' in page
    assert "dw-deadline-fact" in page and "timeout 1 day" in page


def test_the_cli_triggers_with_a_timeout(workflows_env):
    call_command("workflows", "trigger", "surface-rounds", '{"round": 2}', "--id", "cli", "--timeout", "3 hours",
                 stdout=io.StringIO())
    assert Instance.objects.get(instance_id="cli").timeout == timedelta(hours=3)
