"""Declared events: each role x event type x channel gets the documented answer, and a refusal stores
nothing. The workflow is tests/testapp/workflows.py's Refund:

- manager-approval: needs testapp.approve_refund besides send_event, an approval, with a schema;
- refund-settled: webhook-only, with a schema;
- note: open to anyone who may send events;
- anything else: undeclared.
"""

from __future__ import annotations

import html
import io
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_workflows import EventRefused, InvalidEvent, WorkflowEntrypoint, workflows
from django_workflows.surfaces.checks import check_workflows
from django_workflows.shared.definition import registry
from django_workflows.models import Event, Instance
from django_workflows.webhooks import sign

SECRET = "whsec-refund"
ROLES = {
    # role: the permissions it holds besides view_instance
    "nobody": [],
    "sender": ["django_workflows.send_event"],
    "manager": ["django_workflows.send_event", "testapp.approve_refund"],
}
VALID = {"manager-approval": {"outcome": "approved"}, "refund-settled": {"amount": 12.5}, "note": {"text": "hi"},
         "bogus": {}}

# What the authenticated API answers each role for each type: (status, error code or None).
API_ANSWERS = {
    ("nobody", "manager-approval"): (403, "permission_denied"),
    ("nobody", "note"): (403, "permission_denied"),
    ("sender", "manager-approval"): (403, "event_permission"),
    ("sender", "refund-settled"): (403, "webhook_only"),
    ("sender", "note"): (202, None),
    ("sender", "bogus"): (400, "invalid_event_type"),
    ("manager", "manager-approval"): (202, None),
    ("manager", "refund-settled"): (403, "webhook_only"),
    ("manager", "note"): (202, None),
    ("manager", "bogus"): (400, "invalid_event_type"),
}
# The signed webhook endpoint: no user, the workflow's secret.
WEBHOOK_ANSWERS = {
    "manager-approval": (403, "not_a_webhook"),
    "refund-settled": (202, None),
    "note": (403, "not_a_webhook"),
    "bogus": (400, "invalid_event_type"),
}


def user_with(role: str) -> User:
    user = User.objects.create_user(role, password="pw", is_staff=True)
    codenames = ["view_instance", *(p.split(".")[1] for p in ROLES[role])]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def refund(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": SECRET}}
    handle = workflows.get("refund").create(id="r1")
    workflows_env.run_until_idle()
    return handle


def stored() -> list[tuple[str, object]]:
    return list(Event.objects.order_by("id").values_list("type", "payload"))


# -- the API and the webhook endpoint ----------------------------------------------------------------

@pytest.mark.parametrize(("role", "event_type"), sorted(API_ANSWERS))
def test_the_api_answers_each_role_and_type_as_declared(refund, role, event_type):
    client = APIClient()
    client.force_authenticate(user_with(role))
    response = client.post(f"/workflows/refund/instances/r1/events/{event_type}/", VALID[event_type],
                           format="json")
    status, code = API_ANSWERS[(role, event_type)]
    assert response.status_code == status, response.content
    if code is None:
        assert stored() == [(event_type, VALID[event_type])]
    else:
        assert response.json()["error"]["code"] == code
        assert stored() == []


@pytest.mark.parametrize("event_type", sorted(WEBHOOK_ANSWERS))
def test_the_webhook_endpoint_takes_only_types_declared_webhook(refund, event_type):
    body = json.dumps(VALID[event_type]).encode()
    response = APIClient().post(f"/workflows/refund/instances/r1/webhooks/{event_type}/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body))
    status, code = WEBHOOK_ANSWERS[event_type]
    assert response.status_code == status, response.content
    if code is None:
        assert stored() == [(event_type, VALID[event_type])]
    else:
        assert response.json()["error"]["code"] == code
        assert stored() == []


@pytest.mark.parametrize(("payload", "path"), [
    ({"outcome": "maybe"}, "$.outcome"),
    ({}, "$"),
    ({"outcome": "approved", "comment": 7}, "$.comment"),
    ([1, 2], "$"),
    (None, "$"),
])
def test_a_payload_its_schema_refuses_is_a_400_naming_the_path_and_stores_nothing(refund, payload, path):
    client = APIClient()
    client.force_authenticate(user_with("manager"))
    response = client.post("/workflows/refund/instances/r1/events/manager-approval/",
                           json.dumps(payload) if payload is not None else "", content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_payload"
    assert f"at {path}:" in error["message"], error["message"]
    assert stored() == []


def test_a_signed_payload_its_schema_refuses_is_a_400(refund):
    body = b'{"amount": -3}'
    response = APIClient().post("/workflows/refund/instances/r1/webhooks/refund-settled/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body))
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_payload"
    assert "$.amount" in response.json()["error"]["message"]
    assert stored() == []


def test_the_declared_flow_completes_through_its_channels(refund, workflows_env):
    client = APIClient()
    client.force_authenticate(user_with("manager"))
    assert client.post("/workflows/refund/instances/r1/events/manager-approval/", {"outcome": "approved"},
                       format="json").status_code == 202
    workflows_env.run_until_idle()
    body = b'{"amount": 40}'
    assert APIClient().post("/workflows/refund/instances/r1/webhooks/refund-settled/", body,
                            content_type="application/json",
                            HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body)).status_code == 202
    workflows_env.run_until_idle()
    assert refund.status()["output"] == {"refunded": True, "amount": 40}


def test_the_workflow_detail_lists_its_declared_events(refund):
    client = APIClient()
    client.force_authenticate(user_with("sender"))
    events = {event["type"]: event for event in client.get("/workflows/refund/").json()["events"]}
    assert set(events) == {"manager-approval", "refund-settled", "note"}
    assert events["manager-approval"]["permission"] == "testapp.approve_refund"
    assert events["manager-approval"]["approval"] and events["refund-settled"]["webhook"]
    assert events["refund-settled"]["schema"]["required"] == ["amount"]
    assert client.get("/workflows/approval/").json()["events"] is None


def test_the_schema_describes_each_declared_types_payload(refund):
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    paths = client.get("/workflows/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    approval = paths["/workflows/refund/instances/{instance_id}/events/manager-approval/"]["post"]
    body = approval["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["outcome"] == {"enum": ["approved", "rejected"]}
    assert sorted(p["name"] for p in approval["parameters"]) == ["Idempotency-Key", "instance_id"]
    settled = paths["/workflows/refund/instances/{instance_id}/webhooks/refund-settled/"]["post"]
    assert settled["requestBody"]["content"]["application/json"]["schema"]["required"] == ["amount"]
    assert "/workflows/refund/instances/{instance_id}/events/refund-settled/" not in paths


# -- the admin -----------------------------------------------------------------------------------------

def admin_as(role: str) -> Client:
    client = Client()
    client.force_login(user_with(role))
    return client


@pytest.mark.parametrize(("role", "allowed"), [("sender", False), ("manager", True)])
def test_the_admins_approve_button_needs_the_declared_permission(refund, role, allowed):
    instance = Instance.objects.get(pk=refund.pk)
    client = admin_as(role)
    page = html.unescape(
        client.get(reverse("admin:django_workflows_instance_change", args=[instance.pk])).content.decode())
    assert ('name="outcome"' in page) is allowed
    assert ("needs the permission 'testapp.approve_refund'" in page) is not allowed
    response = client.post(reverse("admin:django_workflows_instance_decide", args=[instance.pk]),
                           {"outcome": "approved", "step": "approval-1"}, follow=True)
    [(level, text)] = [(m.level_tag, str(m)) for m in response.context["messages"]]
    if allowed:
        assert level == "success" and stored() == [("manager-approval", {"outcome": "approved"})]
    else:
        assert level == "error" and "testapp.approve_refund" in text and stored() == []


@pytest.mark.parametrize(("event_type", "payload", "refusal"), [
    ("refund-settled", '{"amount": 1}', "webhook-only"),
    ("bogus", "{}", "does not declare event type 'bogus'"),
    ("manager-approval", '{"outcome": "maybe"}', "at $.outcome"),
])
def test_the_admins_send_event_form_refuses_what_the_declaration_refuses(refund, event_type, payload, refusal):
    instance = Instance.objects.get(pk=refund.pk)
    response = admin_as("manager").post(reverse("admin:django_workflows_instance_send_event", args=[instance.pk]),
                                        {"type": event_type, "payload": payload}, follow=True)
    [(level, text)] = [(m.level_tag, str(m)) for m in response.context["messages"]]
    assert level == "error" and refusal in text, text
    assert stored() == []


def test_a_waiting_non_approval_type_shows_no_buttons(refund, workflows_env):
    refund.send_event("manager-approval", {"outcome": "approved"})
    workflows_env.run_until_idle()
    instance = Instance.objects.get(pk=refund.pk)
    assert instance.waiting_for == ["refund-settled"]
    page = admin_as("manager").get(reverse("admin:django_workflows_instance_change", args=[instance.pk]))
    assert 'name="outcome"' not in page.content.decode()


# -- the command line and Python -------------------------------------------------------------------

def send(*args) -> str:
    out = io.StringIO()
    call_command("workflows", "instances", "send-event", "refund", "r1", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize(("args", "refusal"), [
    (["--type", "manager-approval", "--payload", '{"outcome": "approved"}'], "--user NAME"),
    (["--type", "manager-approval", "--payload", '{"outcome": "approved"}', "--user", "sender"],
     "which 'sender' does not have"),
    (["--type", "note", "--user", "nobody"], "lacks the permission django_workflows.send_event"),
    (["--type", "note", "--user", "ghost"], "No user named 'ghost'"),
    (["--type", "refund-settled", "--payload", '{"amount": 1}', "--user", "manager"], "webhook-only"),
    (["--type", "bogus"], "does not declare event type 'bogus'"),
    (["--type", "manager-approval", "--payload", '{"outcome": 1}', "--user", "manager"], "at $.outcome"),
])
def test_the_command_line_refuses_what_the_declaration_refuses(refund, args, refusal):
    for role in ROLES:
        user_with(role)
    with pytest.raises(CommandError, match=None) as raised:
        send(*args)
    assert refusal in str(raised.value), str(raised.value)
    assert stored() == []


def test_the_command_line_sends_as_the_named_user(refund):
    user_with("manager")
    assert "Sent event 'manager-approval'" in send("--type", "manager-approval", "--payload",
                                                   '{"outcome": "rejected"}', "--user", "manager")
    assert Event.objects.get().sender == "cli:manager"
    send("--type", "note")  # an open type needs no --user
    assert stored()[-1] == ("note", None)


def test_python_code_is_trusted_with_any_declared_type_but_not_an_undeclared_one(refund):
    refund.send_event("refund-settled", {"amount": 3})
    with pytest.raises(InvalidEvent, match="does not declare event type 'bogus'; it accepts: manager-approval"):
        refund.send_event("bogus")
    with pytest.raises(InvalidEvent, match=r"at \$.amount"):
        refund.send_event("refund-settled", {"amount": "three"})
    assert stored() == [("refund-settled", {"amount": 3})]
    assert issubclass(EventRefused, PermissionError)


# -- definitions -----------------------------------------------------------------------------------

class WaitsForUndeclared(WorkflowEntrypoint):
    events = {"go": {}}

    def run(self, event, step):
        return step.wait_for_event("wait", "stop", timeout="1 hour").payload


class BadlyDeclared(WorkflowEntrypoint):
    approvals = {"sign-off"}
    events = {
        "-bad": {},
        "ok": {"permision": "x.y"},
        "hook": {"webhook": True, "approval": True, "permission": "nodot"},
        "shaped": {"schema": {"type": "no-such-type"}},
        "flag": {"approval": "yes"},
    }

    def run(self, event, step):
        return None


registry.unregister(WaitsForUndeclared)
registry.unregister(BadlyDeclared)


@pytest.fixture
def definitions():
    registry.register(WaitsForUndeclared)
    registry.register(BadlyDeclared)
    yield
    registry.unregister(WaitsForUndeclared)
    registry.unregister(BadlyDeclared)


def test_the_check_reports_bad_declarations_and_waits_for_undeclared_types(definitions):
    messages = {(m.id, m.msg) for m in check_workflows(None)}
    declared = [msg for id_, msg in messages if id_ == "django_workflows.E013"]
    text = "\n".join(declared)
    for problem in ("'-bad' is not an event type", "'ok' has unknown rules ['permision']",
                    "'hook' cannot be both an approval", "must be 'app_label.codename', got 'nodot'",
                    "the schema of 'shaped' is not a valid JSON Schema", "the approval rule of 'flag' must be",
                    "approvals names 'sign-off', which events does not declare"):
        assert problem in text, text
    waits = [msg for id_, msg in messages if id_ == "django_workflows.E014"]
    assert len(waits) == 1 and "WaitsForUndeclared.run" in waits[0] and "'stop'" in waits[0]


def test_a_wait_for_an_undeclared_type_errors_the_instance_instead_of_waiting_out_its_timeout(
        definitions, workflows_env):
    handle = workflows.get("waits-for-undeclared").create(id="w1")
    workflows_env.run_until_idle()
    status = handle.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "WorkflowConfigError"
    assert "'stop', which workflow 'waits-for-undeclared' does not declare" in status["error"]["message"]


class BeforeTheDeploy(WorkflowEntrypoint):
    name = "redeclared"
    events = {"go": {}, "stop": {}}

    def run(self, event, step):
        got = step.wait_for_event("first", "go", timeout="1 hour")
        return [got.payload, step.wait_for_event("second", "stop", timeout="1 hour").payload]


class AfterTheDeploy(WorkflowEntrypoint):
    """The same run(), deployed with "go" no longer among its events."""

    name = "redeclared"
    events = {"stop": {}}

    def run(self, event, step):
        got = step.wait_for_event("first", "go", timeout="1 hour")
        return [got.payload, step.wait_for_event("second", "stop", timeout="1 hour").payload]


registry.unregister(BeforeTheDeploy)
registry.unregister(AfterTheDeploy)


def test_a_wait_journaled_before_its_type_left_the_declaration_goes_on(workflows_env):
    registry.register(BeforeTheDeploy)
    try:
        handle = workflows.get("redeclared").create(id="d1")
        workflows_env.run_until_idle()
        handle.send_event("go", 1)
        workflows_env.run_until_idle()
    finally:
        registry.unregister(BeforeTheDeploy)
    registry.register(AfterTheDeploy)
    try:
        handle.send_event("stop", 2)
        workflows_env.run_until_idle()
        assert handle.status()["status"] == "complete", handle.status()
        assert handle.status()["output"] == [1, 2]
    finally:
        registry.unregister(AfterTheDeploy)
