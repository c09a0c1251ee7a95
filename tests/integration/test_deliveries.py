"""What the inbox remembers of what it was sent (issue 34): a signed webhook is known by its signature
whatever Idempotency-Key it carries, keys are each channel's own and compared as canonical JSON, and
both outlive a restart."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.errors import IdempotencyKeyReused
from django_workflows.models import Delivery, Event
from django_workflows.webhooks import sign

SECRET = "whsec-deliveries"


@pytest.fixture
def shared_secret(workflows_env, settings):
    """Two awaiter instances and an approval instance, the two workflows sharing one secret."""
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"awaiter": SECRET, "approval": SECRET}}
    for instance_id in ("a1", "a2"):
        workflows.get("awaiter").create(id=instance_id)
    workflows.get("approval").create(id="p1")
    workflows_env.run_until_idle()


def webhook(body: bytes, signature: str, *, key: str | None = None, workflow="awaiter", instance="a1",
            event_type="go"):
    headers = {"HTTP_X_WORKFLOWS_SIGNATURE": signature}
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return APIClient().post(f"/workflows/{workflow}/instances/{instance}/webhooks/{event_type}/", body,
                            content_type="application/json", **headers)


def refused_as_duplicate(response) -> bool:
    return response.status_code == 409 and response.json()["error"]["code"] == "duplicate_delivery"


# Defect 1: the key replaced the signature's delivery id, and the key's id was per instance.

def test_a_signed_delivery_with_a_key_cannot_be_replayed_anywhere(shared_secret):
    body = b'{"outcome": "approved"}'
    signature = sign(SECRET, body, idempotency_key="evt_1")
    assert webhook(body, signature, key="evt_1").status_code == 202
    assert refused_as_duplicate(webhook(body, signature, key="evt_1"))
    assert refused_as_duplicate(webhook(body, signature, key="evt_1", instance="a2"))
    assert refused_as_duplicate(webhook(body, signature, key="evt_1", event_type="other"))
    assert refused_as_duplicate(webhook(body, signature, key="evt_1", workflow="approval", instance="p1",
                                        event_type="manager-approval"))
    assert Event.objects.count() == 1
    assert workflows.get("approval").get("p1").status()["status"] == "waiting"


def test_a_providers_retry_signed_anew_is_answered_once_and_cannot_be_replayed_elsewhere(shared_secret):
    body = b'{"paid": true}'
    now = int(time.time())
    first = webhook(body, sign(SECRET, body, timestamp=now - 30, idempotency_key="evt_2"), key="evt_2")
    retry_signature = sign(SECRET, body, timestamp=now, idempotency_key="evt_2")
    retry = webhook(body, retry_signature, key="evt_2")
    assert first.status_code == retry.status_code == 202, retry.content
    assert retry.json()["event_id"] == first.json()["event_id"]
    # The retry's own bytes are remembered too.
    assert refused_as_duplicate(webhook(body, retry_signature, key="evt_2", instance="a2"))
    assert Event.objects.count() == 1


# Defect 5: {"v": true} was taken for a repeat of {"v": 1}.

@pytest.fixture
def api(shared_secret):
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    return client


def post_event(client, payload, key, instance="a1"):
    return client.post(f"/workflows/awaiter/instances/{instance}/events/go/", json.dumps(payload),
                       content_type="application/json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.mark.parametrize(("first", "second"), [
    ({"v": 1}, {"v": True}), ({"v": True}, {"v": 1}), ({"v": 0}, {"v": False}), ({"v": 1}, {"v": 1.0}),
    ([1, 2], [2, 1]), ({"v": None}, {}),
])
def test_a_key_repeated_with_a_payload_of_other_json_types_is_refused(api, first, second):
    assert post_event(api, first, "k").status_code == 202
    response = post_event(api, second, "k")
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    handle = workflows.get("awaiter").get("a1")
    handle.send_event("go", first, idempotency_key="python-k")
    with pytest.raises(IdempotencyKeyReused):
        handle.send_event("go", second, idempotency_key="python-k")
    assert Event.objects.count() == 2


def test_a_key_repeated_with_the_same_document_in_another_key_order_is_a_repeat(api):
    first = api.post("/workflows/awaiter/instances/a1/events/go/", b'{"a": 1, "b": [true, {"c": "x"}]}',
                     content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    again = api.post("/workflows/awaiter/instances/a1/events/go/", b'{"b":[true,{"c":"x"}],"a":1}',
                     content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert first.status_code == again.status_code == 202
    assert again.json()["event_id"] == first.json()["event_id"]
    assert Event.objects.count() == 1


# Defect 6: a restart deleted the events it took back, and what had stored them with them.

def test_a_signed_delivery_is_refused_after_a_restart_from_its_step(shared_secret, workflows_env):
    handle = workflows.get("approval").get("p1")
    body = b'{"outcome": "approved"}'
    signature = sign(SECRET, body)
    assert webhook(body, signature, workflow="approval", instance="p1", event_type="manager-approval"
                   ).status_code == 202
    workflows_env.run_until_idle()
    assert handle.status()["output"]["status"] == "approved"
    handle.restart(from_step="approval")
    workflows_env.run_until_idle()
    assert handle.status()["status"] == "waiting"
    again = webhook(body, signature, workflow="approval", instance="p1", event_type="manager-approval")
    assert refused_as_duplicate(again), again.content
    assert handle.status()["status"] == "waiting" and not Event.objects.exists()


def test_a_key_is_answered_as_the_first_after_a_restart_from_the_top(api, workflows_env):
    handle = workflows.get("awaiter").get("a1")
    first = post_event(api, {"n": 1}, "k")
    workflows_env.run_until_idle()
    handle.restart()
    workflows_env.run_until_idle()
    again = post_event(api, {"n": 1}, "k")
    assert again.status_code == 202 and again.json()["event_id"] == first.json()["event_id"]
    assert not Event.objects.exists()  # the restart took the first back; the repeat stored nothing
    assert post_event(api, {"n": 2}, "k").status_code == 409


# Defect 7: the API and the webhook shared one namespace of keys per instance.

def test_a_persons_key_through_the_api_does_not_block_the_providers_delivery(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": "whsec-refund"}}
    handle = workflows.get("refund").create(id="r1")
    workflows_env.run_until_idle()
    sender = User.objects.create_user("mallory", password="pw")
    sender.user_permissions.set(Permission.objects.filter(codename__in=["view_instance", "send_event"]))
    client = APIClient()
    client.force_authenticate(sender)
    assert client.post("/workflows/refund/instances/r1/events/note/", {}, format="json",
                       HTTP_IDEMPOTENCY_KEY="evt_1001").status_code == 202
    body = b'{"amount": 12.5}'
    genuine = webhook(body, sign("whsec-refund", body, idempotency_key="evt_1001"), key="evt_1001",
                      workflow="refund", instance="r1", event_type="refund-settled")
    assert genuine.status_code == 202, genuine.content
    assert sorted(Event.objects.values_list("type", flat=True)) == ["note", "refund-settled"]
    # Each channel keeps its own keys, on the same instance.
    for channel in ("admin", "cli", "python"):
        handle.send_event("note", {}, channel=channel, user=sender, idempotency_key="evt_1001")
    assert Event.objects.filter(type="note").count() == 4
    assert Delivery.objects.count() == 6  # five keys and one signature
