"""The REST API: every endpoint, every error code, permissions per role, webhooks."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Event, Instance, Step
from django_workflows.webhooks import sign

ROLES = {
    "viewer": ["view_instance"],
    "creator": ["view_instance", "add_instance"],
    "operator": ["view_instance", "change_instance"],
    "approver": ["view_instance", "send_event"],
    "nobody": [],
}


@pytest.fixture
def client_for(db):
    def make(role: str | None = "admin") -> APIClient:
        client = APIClient()
        if role is None:
            return client
        if role == "admin":
            user = User.objects.create_superuser("admin", "admin@example.com", "pw")
        else:
            user = User.objects.create_user(role, password="pw")
            user.user_permissions.set(Permission.objects.filter(codename__in=ROLES[role]))
        token = Token.objects.create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def api(client_for, workflows_env):
    return client_for("admin")


def error_code(response):
    return response.json()["error"]["code"]


def waiting_approval(env, instance_id="a1"):
    instance = workflows.get("approval").create(id=instance_id, params={})
    env.run_until_idle()
    return instance


# Endpoints.

def test_list_workflows_with_counts_per_status(api, workflows_env):
    workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    workflows.get("three-steps").create()
    response = api.get("/workflows/")
    assert response.status_code == 200
    by_name = {w["name"]: w for w in response.json()}
    assert by_name["three-steps"]["instances"]["complete"] == 1
    assert by_name["three-steps"]["instances"]["queued"] == 1
    assert by_name["approval"]["instances"]["waiting"] == 0


def test_workflow_detail_and_unknown_workflow(api):
    assert api.get("/workflows/approval/").json()["name"] == "approval"
    response = api.get("/workflows/nope/")
    assert response.status_code == 404 and error_code(response) == "workflow_not_found"


def test_create_and_describe_an_instance(api, workflows_env):
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "i-1", "params": {"x": 1}},
                        format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["id"] == "i-1" and response.json()["status"] == "queued"
    workflows_env.run_until_idle()
    body = api.get("/workflows/three-steps/instances/i-1/").json()
    assert body["status"] == "complete" and body["params"] == {"x": 1}
    assert body["output"]["sum"] == 6
    assert [step["type"] for step in body["steps"]] == ["do", "do", "do"]
    assert body["steps"][0]["attempts"][0]["success"] is True
    assert body["steps"][0]["config"]["retries"]["limit"] == 5
    assert {"queued", "start", "end", "error"} <= set(body)


def test_create_without_body_uses_a_uuid(api):
    response = api.post("/workflows/three-steps/instances/", content_type="application/json")
    assert response.status_code == 201 and len(response.json()["id"]) == 36


def test_moments_are_iso_8601_as_stored_whatever_the_projects_drf_settings_and_time_zone(api, workflows_env,
                                                                                      settings):
    # DRF's DateTimeField would follow DATETIME_FORMAT, move each moment to the current time zone and
    # write UTC as "Z"; the API writes datetime.isoformat() of the stored value.
    settings.REST_FRAMEWORK = {"DATETIME_FORMAT": "%d/%m/%Y"}
    waiting_approval(workflows_env)
    row = Instance.objects.get(instance_id="a1")
    ask, wait = Step.objects.filter(instance_id=row.pk).order_by("id")
    with timezone.override("Asia/Kolkata"):
        body = api.get("/workflows/approval/instances/a1/").json()
        listed = api.get("/workflows/approval/instances/").json()["results"][0]
    assert body["queued"] == listed["queued"] == row.created_at.isoformat()
    assert body["queued"].endswith("+00:00") and body["end"] is None
    assert body["steps"][0]["attempts"][0]["start"] == ask.attempts[0]["start"]  # the journal's own text
    assert body["steps"][0]["end"] == ask.ended_at.isoformat()
    assert body["steps"][1]["deadline"] == wait.wake_at.isoformat()


def test_steps_show_sleeps_waits_and_failed_attempts(api, workflows_env):
    workflows.get("flaky").create(id="f", params={"failures": 1, "config": {"retries": {"limit": 1, "delay": 1000}}})
    waiting_approval(workflows_env)
    workflows_env.advance("1 second")
    flaky = api.get("/workflows/flaky/instances/f/").json()
    attempts = flaky["steps"][0]["attempts"]
    assert [a["success"] for a in attempts] == [False, True]
    assert attempts[0]["error"] == {"name": "ValueError", "message": "failure 1"}
    approval = api.get("/workflows/approval/instances/a1/").json()
    assert approval["steps"][1]["type"] == "waitForEvent" and approval["steps"][1]["deadline"]


def test_list_instances_paginated_and_filtered(api, workflows_env):
    for n in range(3):
        workflows.get("three-steps").create(id=f"done-{n}")
    workflows_env.run_until_idle()
    workflows.get("three-steps").create(id="queued-1")
    page = api.get("/workflows/three-steps/instances/?per_page=2").json()
    assert page["count"] == 4 and len(page["results"]) == 2 and page["next"]
    complete = api.get("/workflows/three-steps/instances/?status=complete").json()
    assert {i["id"] for i in complete["results"]} == {"done-0", "done-1", "done-2"}
    response = api.get("/workflows/three-steps/instances/?status=sleeping")
    assert response.status_code == 400 and error_code(response) == "invalid_status"


def test_batch_is_idempotent(api):
    batch = [{"instance_id": "b1", "params": {"n": 1}}, {"instance_id": "b2"}]
    first = api.post("/workflows/three-steps/instances/batch/", batch, format="json")
    assert first.status_code == 201 and [i["id"] for i in first.json()] == ["b1", "b2"]
    again = api.post("/workflows/three-steps/instances/batch/", batch, format="json")
    assert again.status_code == 201
    assert Instance.objects.count() == 2


def test_batch_limits(api):
    too_many = [{"instance_id": f"i{n}"} for n in range(101)]
    response = api.post("/workflows/three-steps/instances/batch/", too_many, format="json")
    assert response.status_code == 400
    response = api.post("/workflows/three-steps/instances/batch/", {"not": "a list"}, format="json")
    assert response.status_code == 400
    assert not Instance.objects.exists()


@pytest.mark.parametrize("action, before, after", [
    ("pause", "waiting", "paused"), ("terminate", "waiting", "terminated"), ("restart", "waiting", "queued"),
])
def test_change_status(api, workflows_env, action, before, after):
    waiting_approval(workflows_env)
    response = api.patch("/workflows/approval/instances/a1/status/", {"status": action}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == after


def test_resume(api, workflows_env):
    instance = waiting_approval(workflows_env)
    instance.pause()
    response = api.patch("/workflows/approval/instances/a1/status/", {"status": "resume"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "queued"


def test_send_event_is_202_and_records_the_sender(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.post("/workflows/approval/instances/a1/events/manager-approval/", {"outcome": "approved"},
                        format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["accepted"] is True
    event = Event.objects.get()
    assert event.payload == {"outcome": "approved"} and event.sender == "api:admin"
    workflows_env.run_until_idle()
    assert api.get("/workflows/approval/instances/a1/").json()["output"]["status"] == "approved"


def test_an_event_with_an_empty_body_has_a_null_payload(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.post("/workflows/approval/instances/a1/events/ping/", content_type="application/json")
    assert response.status_code == 202 and Event.objects.get().payload is None


def test_session_authentication(client_for, workflows_env):
    User.objects.create_superuser("staff", "s@example.com", "pw")
    client = APIClient()
    assert client.login(username="staff", password="pw")
    assert client.get("/workflows/").status_code == 200


# Error codes.

@pytest.mark.parametrize("path, code", [
    ("/workflows/three-steps/instances/missing/", "instance_not_found"),
    ("/workflows/nope/instances/", "workflow_not_found"),
    ("/workflows/nope/instances/x/", "workflow_not_found"),
])
def test_404s(api, path, code):
    response = api.get(path)
    assert response.status_code == 404 and error_code(response) == code


def test_invalid_id_is_400(api):
    response = api.get("/workflows/three-steps/instances/bad%20id/")
    assert response.status_code == 400 and error_code(response) == "invalid_id"
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "bad id"}, format="json")
    assert response.status_code == 400 and error_code(response) == "invalid_id"
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "x" * 101}, format="json")
    assert response.status_code == 400
    assert not Instance.objects.exists()


def test_invalid_event_type_is_400(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.post("/workflows/approval/instances/a1/events/-bad/", {}, format="json")
    assert response.status_code == 400 and error_code(response) == "invalid_event_type"
    assert not Event.objects.exists()


def test_duplicate_id_is_409(api):
    api.post("/workflows/three-steps/instances/", {"instance_id": "dup"}, format="json")
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "dup"}, format="json")
    assert response.status_code == 409 and error_code(response) == "instance_exists"


def test_transition_not_allowed_is_409(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.patch("/workflows/approval/instances/a1/status/", {"status": "resume"}, format="json")
    assert response.status_code == 409 and error_code(response) == "transition_not_allowed"
    response = api.patch("/workflows/approval/instances/a1/status/", {"status": "explode"}, format="json")
    assert response.status_code == 400


def test_event_to_a_finished_instance_is_409(api, workflows_env):
    workflows.get("three-steps").create(id="done")
    workflows_env.run_until_idle()
    response = api.post("/workflows/three-steps/instances/done/events/late/", {}, format="json")
    assert response.status_code == 409 and error_code(response) == "instance_finished"
    assert not Event.objects.exists()


def test_payload_over_1_mib_is_413(api, workflows_env):
    waiting_approval(workflows_env)
    body = json.dumps({"blob": "x" * (1024 * 1024)})
    response = api.post("/workflows/approval/instances/a1/events/manager-approval/", body,
                        content_type="application/json")
    assert response.status_code == 413 and error_code(response) == "payload_too_large"
    response = api.post("/workflows/three-steps/instances/", json.dumps({"params": {"blob": "x" * (1024 * 1024)}}),
                        content_type="application/json")
    assert response.status_code == 413
    assert not Event.objects.exists() and Instance.objects.count() == 1


def test_malformed_json_is_400(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.post("/workflows/approval/instances/a1/events/manager-approval/", "{not json",
                        content_type="application/json")
    assert response.status_code == 400 and error_code(response) == "malformed_json"
    response = api.post("/workflows/three-steps/instances/", "{not json", content_type="application/json")
    assert response.status_code == 400 and error_code(response) == "malformed_json"


def test_wrong_content_type_is_415(api, workflows_env):
    waiting_approval(workflows_env)
    response = api.post("/workflows/approval/instances/a1/events/manager-approval/", "outcome=approved",
                        content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415 and error_code(response) == "unsupported_media_type"
    response = api.post("/workflows/three-steps/instances/", "<xml/>", content_type="text/xml")
    assert response.status_code == 415


def test_unknown_fields_are_400(api):
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "x", "colour": "red"}, format="json")
    assert response.status_code == 400 and "colour" in response.json()["error"]["fields"]


# Permissions per role.

@pytest.mark.parametrize("role, allowed", [
    ("viewer", {"list", "describe"}),
    ("creator", {"list", "describe", "create"}),
    ("operator", {"list", "describe", "status"}),
    ("approver", {"list", "describe", "event"}),
    ("nobody", set()),
    ("admin", {"list", "describe", "create", "status", "event"}),
])
def test_permissions_per_role(client_for, workflows_env, role, allowed):
    waiting_approval(workflows_env)
    client = client_for(role)
    calls = {
        "list": lambda: client.get("/workflows/approval/instances/"),
        "describe": lambda: client.get("/workflows/approval/instances/a1/"),
        "create": lambda: client.post("/workflows/approval/instances/", {"instance_id": "new"}, format="json"),
        "event": lambda: client.post("/workflows/approval/instances/a1/events/manager-approval/", {}, format="json"),
        "status": lambda: client.patch("/workflows/approval/instances/a1/status/", {"status": "pause"}, format="json"),
    }
    for name, call in calls.items():
        response = call()
        if name in allowed:
            assert response.status_code < 400, (name, response.json())
        else:
            assert response.status_code == 403, (name, response.status_code)
            assert error_code(response) == "permission_denied"
    assert Event.objects.exists() == ("event" in allowed)
    assert Instance.objects.filter(instance_id="new").exists() == ("create" in allowed)


def test_unauthenticated_is_401(client_for, workflows_env):
    client = client_for(None)
    for response in (client.get("/workflows/"), client.post("/workflows/approval/instances/", {}, format="json")):
        assert response.status_code == 401 and error_code(response) == "not_authenticated"
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get("/workflows/").status_code == 401


def test_a_token_sent_to_an_api_that_reads_no_tokens_is_told_so(workflows_env, settings):
    token = Token.objects.create(user=User.objects.create_user("bob")).key
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/workflows/").status_code == 403  # read, and bob lacks view_instance
    # As in a project without rest_framework.authtoken in INSTALLED_APPS: session and basic only.
    settings.DJANGO_WORKFLOWS = {"API_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication", "rest_framework.authentication.BasicAuthentication"]}
    response = client.get("/workflows/")
    assert response.status_code == 401 and error_code(response) == "not_authenticated"
    assert response.json()["error"]["message"] == (
        "This API does not accept 'Token' credentials. Add 'rest_framework.authtoken' to INSTALLED_APPS and "
        "migrate, or set DJANGO_WORKFLOWS['API_AUTHENTICATION_CLASSES'].")
    assert Event.objects.count() == 0


# Webhooks.

SECRET = "whsec-test"


@pytest.fixture
def webhook(settings, workflows_env):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": SECRET}}
    waiting_approval(workflows_env)

    def post(body: bytes, signature: str | None, workflow="approval", source="stripe"):
        headers = {"HTTP_X_WORKFLOWS_SOURCE": source}
        if signature is not None:
            headers["HTTP_X_WORKFLOWS_SIGNATURE"] = signature
        return APIClient().post(f"/workflows/{workflow}/instances/a1/webhooks/manager-approval/", body,
                                content_type="application/json", **headers)

    return post


def test_webhook_with_a_valid_signature(webhook, workflows_env):
    body = b'{"outcome": "approved"}'
    response = webhook(body, sign(SECRET, body))
    assert response.status_code == 202, response.json()
    event = Event.objects.get()
    assert event.payload == {"outcome": "approved"} and event.sender == "webhook:stripe@127.0.0.1"
    workflows_env.run_until_idle()
    assert workflows.get("approval").get("a1").status()["output"]["status"] == "approved"


@pytest.mark.parametrize("case", ["wrong", "stale", "missing", "garbled", "other-body", "future"])
def test_webhook_with_a_bad_signature_is_401_and_stores_nothing(webhook, case, monkeypatch):
    import time
    from types import SimpleNamespace

    from django_workflows import webhooks

    # The check's clock stands still, so "301 s ahead" is still 301 s ahead when the request is checked,
    # however long a loaded machine takes to get there.
    now = int(time.time())
    monkeypatch.setattr(webhooks, "time", SimpleNamespace(time=lambda: now))
    body = b'{"outcome": "approved"}'
    signature = {
        "wrong": sign("another-secret", body),
        "stale": sign(SECRET, body, timestamp=now - 301),
        "future": sign(SECRET, body, timestamp=now + 301),
        "missing": None,
        "garbled": "v1=abc",
        "other-body": sign(SECRET, b'{"outcome": "rejected"}'),
    }[case]
    response = webhook(body, signature)
    assert response.status_code == 401 and error_code(response) == "bad_signature"
    assert not Event.objects.exists()


def test_webhook_for_a_workflow_without_a_secret_answers_as_a_wrong_signature(webhook):
    body = b"{}"
    response = webhook(body, sign(SECRET, body), workflow="three-steps")
    assert response.status_code == 401 and error_code(response) == "bad_signature"
