"""Delayed starts and debounce through the API, the CLI and the admin: the same rules as create()."""

import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.shared.transitions import offered


@pytest.fixture
def api(db, workflows_env):
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def post(api, body, name="three-steps"):
    return api.post(f"/workflows/{name}/instances/", body, format="json")


def test_the_api_creates_a_scheduled_instance_and_lists_it_by_status(api, workflows_env):
    response = post(api, {"params": {"n": 1}, "start_in": "10 minutes"})
    assert response.status_code == 201
    assert response.json()["status"] == "scheduled"
    row = Instance.objects.get()
    assert row.wake_at == workflows_env.now + timedelta(minutes=10)
    listed = api.get("/workflows/three-steps/instances/?status=scheduled").json()
    assert [item["id"] for item in listed["results"]] == [row.instance_id]
    workflows_env.advance("10 minutes")
    assert Instance.objects.get().status == "complete"


def test_the_api_takes_a_start_time_with_an_offset(api, workflows_env):
    moment = (workflows_env.now + timedelta(hours=2)).isoformat()
    response = post(api, {"start_at": moment})
    assert response.status_code == 201 and response.json()["status"] == "scheduled"
    assert Instance.objects.get().wake_at == workflows_env.now + timedelta(hours=2)


def test_a_debounced_trigger_that_joins_is_answered_200_with_the_same_instance(api, workflows_env):
    body = {"debounce": {"key": "user-7", "period": "30 seconds"}}
    first = post(api, {**body, "params": {"n": 1}})
    second = post(api, {**body, "params": {"n": 2}})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    assert second.json()["status"] == "scheduled" and second.json()["params"] == {"n": 2}
    assert Instance.objects.count() == 1


@pytest.mark.parametrize("body, field", [
    ({"start_in": "soon"}, "start_in"),
    ({"start_in": True}, "start_in"),
    ({"start_at": "tomorrow"}, "start_at"),
    ({"start_at": "2030-01-01", "start_in": 1000}, "start_in"),
    ({"debounce": {"key": "k"}}, "debounce"),
    ({"debounce": {"key": "k", "period": "1 minute", "merge": "x"}}, "debounce"),
    ({"debounce": {"key": "k", "period": "1 minute", "max_wait": "1 second"}}, "debounce"),
    ({"debounce": {"key": "k", "period": "1 minute"}, "instance_id": "mine"}, "instance_id"),
])
def test_a_start_the_api_cannot_take_is_a_400_that_names_the_field_and_creates_nothing(api, body, field):
    response = post(api, body)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["fields"]
    assert not Instance.objects.exists()


@pytest.mark.parametrize("field", ["start_in", "debounce"])
def test_a_batch_takes_no_delayed_start_or_debounce(api, field):
    value = "1 minute" if field == "start_in" else {"key": "k", "period": "1 minute"}
    response = api.post("/workflows/three-steps/instances/batch/", [{field: value}], format="json")
    assert response.status_code == 400
    assert not Instance.objects.exists()


def test_the_api_refuses_pause_and_allows_terminate_of_a_scheduled_instance(api):
    instance_id = post(api, {"start_in": "1 hour"}).json()["id"]
    status = f"/workflows/three-steps/instances/{instance_id}/status/"
    paused = api.patch(status, {"status": "pause"}, format="json")
    assert paused.status_code == 409 and paused.json()["error"]["code"] == "transition_not_allowed"
    assert api.patch(status, {"status": "terminate"}, format="json").json()["status"] == "terminated"


def run(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue().strip()


def test_the_cli_triggers_a_scheduled_instance(workflows_env):
    instance_id = run("trigger", "three-steps", '{"n": 1}', "--start-in", "5 minutes")
    row = Instance.objects.get(instance_id=instance_id)
    assert (row.status, row.wake_at) == ("scheduled", workflows_env.now + timedelta(minutes=5))
    moment = (workflows_env.now + timedelta(hours=1)).isoformat()
    other = run("trigger", "three-steps", "--start-at", moment)
    assert Instance.objects.get(instance_id=other).wake_at == workflows_env.now + timedelta(hours=1)


def test_the_cli_debounces_triggers_into_one_instance(workflows_env):
    ids = {run("trigger", "three-steps", f'{{"n": {n}}}', "--debounce", "user-7", "--debounce-period", "30 seconds",
               "--debounce-max-wait", "2 minutes") for n in range(3)}
    assert len(ids) == 1
    assert Instance.objects.get().params == {"n": 2}


@pytest.mark.parametrize("args, message", [
    (["--start-at", "2030-01-01T09:00"], "has no UTC offset"),
    (["--start-at", "tomorrow"], "ISO 8601"),
    (["--debounce", "k"], "--debounce needs --debounce-period"),
    (["--debounce-period", "1 minute"], "go with --debounce KEY"),
    (["--start-in", "a while"], "cannot parse 'a while'"),
])
def test_the_cli_refuses_a_start_it_cannot_take_and_creates_nothing(workflows_env, args, message):
    with pytest.raises(CommandError, match=message):
        run("trigger", "three-steps", *args)
    assert not Instance.objects.exists()


def test_the_admin_lists_scheduled_instances_by_their_filter_and_offers_no_pause(admin_client, workflows_env):
    scheduled = workflows.get("three-steps").create(start_in="1 hour")
    queued = workflows.get("three-steps").create()
    html = admin_client.get("/admin/django_workflows/instance/", {"status__exact": "scheduled"}).content.decode()
    assert scheduled.id in html and queued.id not in html
    assert "dw-status-scheduled" in html
    assert [transition.action for transition in offered("scheduled")] == ["terminate", "restart"]
