"""restart(from_step=..., count=...): the journal before that step stays, that step and the later ones
run again, and the events they consumed are gone; through the handle, the API and the CLI."""

from __future__ import annotations

from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from django_workflows import StepNotFound, WorkflowEntrypoint, workflows
from django_workflows.models import Event, Instance, Step

ran = Counter()


@pytest.fixture(autouse=True)
def _reset():
    ran.clear()


def counted(name):
    def body():
        ran[name] += 1
        return f"{name} {ran[name]}"

    return body


class Pipeline(WorkflowEntrypoint):
    name = "restart-pipeline"

    def run(self, event, step):
        parsed = step.do("parse", counted("parse"))
        approval = step.wait_for_event("approval", "approved", timeout="1 hour")
        charged = step.do("charge", counted("charge"))
        step.do("charge", counted("charge again"))
        return [parsed, approval.payload, charged, step.do("notify", counted("notify"))]


@pytest.fixture
def completed(workflows_env):
    instance = workflows.get("restart-pipeline").create(id="p1")
    workflows_env.run_until_idle()
    instance.send_event(type="approved", payload="yes")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["parse 1", "yes", "charge 1", "notify 1"]
    return instance


def keys():
    return list(Step.objects.order_by("id").values_list("key", flat=True))


def test_restart_from_a_step_keeps_the_journal_before_it_and_runs_the_rest_again(completed, workflows_env):
    completed.restart(from_step="charge")
    assert Instance.objects.get(pk=completed.pk).status == "queued"
    assert keys() == ["parse-1", "approval-1"]
    workflows_env.run_until_idle()
    assert completed.status()["output"] == ["parse 1", "yes", "charge 2", "notify 2"]
    assert ran == {"parse": 1, "charge": 2, "charge again": 2, "notify": 2}


def test_the_count_picks_which_step_of_that_name(completed, workflows_env):
    completed.restart(from_step="charge", count=2)
    assert keys() == ["parse-1", "approval-1", "charge-1"]
    workflows_env.run_until_idle()
    assert completed.status()["output"] == ["parse 1", "yes", "charge 1", "notify 2"]
    assert ran["charge again"] == 2 and ran["charge"] == 1


def test_restart_from_a_wait_discards_the_event_it_consumed(completed, workflows_env):
    completed.restart(from_step="approval")
    assert not Event.objects.exists()
    workflows_env.run_until_idle()
    assert completed.status()["status"] == "waiting"
    completed.send_event(type="approved", payload="again")
    workflows_env.run_until_idle()
    assert completed.status()["output"] == ["parse 1", "again", "charge 2", "notify 2"]


def test_a_step_the_journal_does_not_hold_is_refused_and_changes_nothing(completed):
    before = (keys(), Instance.objects.get(pk=completed.pk).epoch)
    with pytest.raises(StepNotFound, match="has no step 'ship' #1"):
        completed.restart(from_step="ship")
    with pytest.raises(StepNotFound, match="has no step 'charge' #3"):
        completed.restart(from_step="charge", count=3)
    assert (keys(), Instance.objects.get(pk=completed.pk).epoch) == before
    assert completed.status()["status"] == "complete"


def test_the_api_restarts_from_a_step(completed, workflows_env):
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    url = "/workflows/restart-pipeline/instances/p1/status/"
    refused = client.patch(url, {"status": "restart", "from": {"name": "ship"}}, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "step_not_found"
    wrong = client.patch(url, {"status": "pause", "from": {"name": "charge"}}, format="json")
    assert wrong.status_code == 400 and "from" in wrong.json()["error"]["fields"]
    bad_count = client.patch(url, {"status": "restart", "from": {"name": "charge", "count": 0}}, format="json")
    assert bad_count.status_code == 400
    assert completed.status()["status"] == "complete"
    response = client.patch(url, {"status": "restart", "from": {"name": "charge", "count": 2}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "queued"
    workflows_env.run_until_idle()
    assert completed.status()["output"] == ["parse 1", "yes", "charge 1", "notify 2"]


def test_the_cli_restarts_from_a_step(completed, workflows_env, capsys):
    call_command("workflows", "instances", "restart", "restart-pipeline", "p1", "--from-step", "notify")
    assert "Restarted restart-pipeline/p1" in capsys.readouterr().out
    assert keys() == ["parse-1", "approval-1", "charge-1", "charge-2"]


def test_the_admin_restarts_from_the_step_a_row_names(completed, workflows_env, client):
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    page = client.get(f"/admin/django_workflows/instance/{completed.pk}/change/").content.decode()
    assert page.count("Restart from here") == 5
    assert 'name="from_step" value="charge"><input type="hidden" name="count" value="2">' in page
    response = client.post(f"/admin/django_workflows/instance/{completed.pk}/steer/restart/",
                           {"from_step": "charge", "count": "2"}, follow=True)
    assert "restarted from step &#x27;charge&#x27; #2" in response.content.decode()
    assert keys() == ["parse-1", "approval-1", "charge-1"]
    missing = client.post(f"/admin/django_workflows/instance/{completed.pk}/steer/restart/",
                          {"from_step": "ship", "count": "1"}, follow=True)
    assert "has no step" in missing.content.decode()
