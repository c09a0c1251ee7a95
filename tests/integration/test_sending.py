"""Sending an event: every surface takes the handle's one path, so a request validates the type once,
authorizes once, checks the payload once and looks the workflow's class up once. The workflow is
tests/testapp/workflows.py's Refund (declared events, a permission, a schema, a webhook-only type)."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import EventPermissionRequired, InvalidEventType, NotAWebhook, WebhookOnly, workflows
from django_workflows.shared import declared_events
from django_workflows.foundations import validation
from django_workflows.shared.definition import Registry
from django_workflows.models import Event, Instance
from django_workflows.webhooks import sign

SECRET = "whsec-refund"
APPROVAL = {"outcome": "approved"}


def user_with(username: str, *permissions: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    codenames = ["view_instance", *(p.split(".")[1] for p in permissions)]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def manager() -> User:
    return user_with("manager", "django_workflows.send_event", "testapp.approve_refund")


@pytest.fixture
def refund(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": SECRET}}
    handle = workflows.get("refund").create(id="r1")
    workflows_env.run_until_idle()
    return handle


@pytest.fixture
def calls(monkeypatch):
    """How many times a request looked the workflow's class up, validated an event type, authorized the
    sender and checked the payload against the declaration."""
    counted = {"class lookups": 0, "type validations": 0, "authorizations": 0, "arrival checks": 0}

    def counting(what, function):
        def counted_call(*args, **kwargs):
            counted[what] += 1
            return function(*args, **kwargs)
        return counted_call

    monkeypatch.setattr(Registry, "get", counting("class lookups", Registry.get))
    # validate_event_type reads is_event_type from its module whichever module imported it.
    monkeypatch.setattr(validation, "is_event_type", counting("type validations", validation.is_event_type))
    monkeypatch.setattr(declared_events, "authorize", counting("authorizations", declared_events.authorize))
    monkeypatch.setattr(declared_events, "check_arrival",
                        counting("arrival checks", declared_events.check_arrival))
    return counted


ONCE = {"class lookups": 1, "type validations": 1, "authorizations": 1, "arrival checks": 1}


def test_an_api_send_looks_the_class_up_validates_and_authorizes_once(refund, calls):
    client = APIClient()
    client.force_authenticate(manager())
    response = client.post("/workflows/refund/instances/r1/events/manager-approval/", APPROVAL, format="json")
    assert response.status_code == 202, response.content
    assert calls == ONCE


def test_a_webhook_send_looks_the_class_up_validates_and_authorizes_once(refund, calls):
    body = b'{"amount": 12.5}'
    response = APIClient().post("/workflows/refund/instances/r1/webhooks/refund-settled/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body))
    assert response.status_code == 202, response.content
    assert calls == ONCE


def test_an_admin_decision_looks_the_class_up_validates_and_authorizes_once(refund, calls):
    client = Client()
    client.force_login(manager())
    instance = Instance.objects.get(pk=refund.pk)
    response = client.post(reverse("admin:django_workflows_instance_decide", args=[instance.pk]),
                           {"outcome": "approved", "step": instance.current_step})
    assert response.status_code == 302
    assert Event.objects.get().type == "manager-approval"
    # The decide view asks which type the wait declares an approval (its own lookup, to choose the type
    # it sends); sending it looks the class up once more, and no more.
    assert calls == {**ONCE, "class lookups": 2}


def test_an_admin_event_looks_the_class_up_validates_and_authorizes_once(refund, calls):
    client = Client()
    client.force_login(manager())
    response = client.post(reverse("admin:django_workflows_instance_send_event", args=[refund.pk]),
                           {"type": "note", "payload": '{"text": "hi"}'})
    assert response.status_code == 302
    assert Event.objects.get().type == "note"
    assert calls == ONCE


def test_a_command_line_send_looks_the_class_up_validates_and_authorizes_once(refund, calls):
    manager()
    call_command("workflows", "instances", "send-event", "refund", "r1", "--type", "manager-approval",
                 "--payload", json.dumps(APPROVAL), "--user", "manager", stdout=io.StringIO())
    assert Event.objects.get().sender == "cli:manager"
    assert calls == ONCE


def test_a_python_send_looks_the_class_up_once_and_authorizes_no_one(refund, calls):
    workflows.get("refund").get("r1").send_event(type="manager-approval", payload=APPROVAL)
    assert calls == {**ONCE, "authorizations": 0}


def test_an_api_send_costs_a_fixed_number_of_queries(refund):
    user = manager()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")

    def send(outcome):
        with CaptureQueriesContext(connection) as ctx:
            response = client.post("/workflows/refund/instances/r1/events/note/", {"text": outcome},
                                   format="json")
        assert response.status_code == 202, response.content
        return [query["sql"] for query in ctx.captured_queries if "SAVEPOINT" not in query["sql"]]

    send("warm")  # the content types and other caches the first request fills
    # the token and its user, the user's and their groups' permissions, the instance, lock it, store the
    # event (its INSERT counts the unconsumed events against the quotas), read the instance for the answer
    assert len(send("again")) == 7, send("again")


# -- the handle's arguments ------------------------------------------------------------------------

def test_the_sender_is_recorded_from_the_channel_and_the_user(refund):
    sent = refund.send_event("note", {"text": "hi"}, channel=declared_events.API, user=manager())
    assert sent.sender == "api:manager" and not sent.repeated
    assert Event.objects.get(pk=sent).sender == "api:manager"
    # A sender named outright is kept as it is, and Python code that names none records none.
    assert Event.objects.get(pk=refund.send_event("note", sender="billing-job")).sender == "billing-job"
    assert Event.objects.get(pk=refund.send_event("note")).sender == ""


def test_a_repeat_under_an_idempotency_key_says_so_and_returns_the_first_id(refund):
    first = refund.send_event("note", {"n": 1}, idempotency_key="k")
    again = refund.send_event("note", {"n": 1}, idempotency_key="k")
    assert again == first and again.event_id == int(first)
    assert not first.repeated and again.repeated
    assert Event.objects.count() == 1


@pytest.mark.parametrize(("event_type", "channel", "who", "refusal"), [
    # A user without send_event may send nothing, an open type included.
    ("note", declared_events.API, "nobody", EventPermissionRequired),
    ("note", declared_events.PYTHON, "anonymous", EventPermissionRequired),
    # A user with send_event still needs the type's declared permission.
    ("manager-approval", declared_events.ADMIN, "sender", EventPermissionRequired),
    # A person, through any channel, cannot send a webhook-only type.
    ("refund-settled", declared_events.PYTHON, "manager", WebhookOnly),
    ("refund-settled", declared_events.CLI, None, WebhookOnly),
    # A signed delivery sends only what is declared a webhook.
    ("note", declared_events.WEBHOOK, None, NotAWebhook),
    # Refused before the sender is asked about: not an event type at all.
    ("-bad", declared_events.API, "manager", InvalidEventType),
])
def test_the_handle_refuses_what_the_channel_and_user_may_not_send(refund, event_type, channel, who, refusal):
    users = {"nobody": lambda: user_with("nobody"), "anonymous": AnonymousUser, "manager": manager,
             "sender": lambda: user_with("sender", "django_workflows.send_event"), None: lambda: None}
    with pytest.raises(refusal):
        refund.send_event(event_type, {"amount": 1, **APPROVAL}, channel=channel, user=users[who]())
    assert not Event.objects.exists()


def test_a_user_named_from_python_is_authorized_as_through_any_other_channel(refund):
    sent = refund.send_event("manager-approval", APPROVAL, user=manager())
    assert Event.objects.get(pk=sent).sender == "python:manager"
