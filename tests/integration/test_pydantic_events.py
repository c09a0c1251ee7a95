"""A Pydantic model as an event type's schema: it validates payloads wherever they arrive (a clear 400
through the API, nothing stored), run() gets the model's instance from wait_for_event on the first run and
on every replay, and the OpenAPI document shows the model's JSON Schema for that type."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pydantic
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.surfaces.checks import check_workflows
from django_workflows.shared.definition import registry
from django_workflows.models import Event

seen: list = []


class Money(pydantic.BaseModel):
    amount: Decimal
    currency: str = pydantic.Field(pattern="^[A-Z]{3}$")


class OrderPaid(pydantic.BaseModel):
    order: int
    paid: Money
    at: datetime


class AwaitsPayment(WorkflowEntrypoint):
    name = "awaits-payment"
    events = {"order-paid": {"schema": OrderPaid}, "note": {}}

    def run(self, event, step):
        paid = step.wait_for_event("paid", "order-paid", timeout="1 hour")
        seen.append(paid.payload)
        # The replay after the nap reads the event from the journal.
        step.sleep("nap", "1 second")
        return {"order": paid.payload.order, "amount": paid.payload.paid.amount}


registry.unregister(AwaitsPayment)

VALID = {"order": 42, "paid": {"amount": "12.30", "currency": "EUR"}, "at": "2024-05-01T09:00:00Z"}
EXPECTED = OrderPaid(order=42, paid=Money(amount=Decimal("12.30"), currency="EUR"),
                     at=datetime(2024, 5, 1, 9, tzinfo=UTC))


@pytest.fixture
def waiting(workflows_env):
    registry.register(AwaitsPayment)
    seen.clear()
    handle = workflows.get("awaits-payment").create(id="p1")
    workflows_env.run_until_idle()
    yield handle
    registry.unregister(AwaitsPayment)


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    return client


def test_run_gets_the_models_instance_on_the_first_run_and_on_every_replay(waiting, api, workflows_env):
    response = api.post("/workflows/awaits-payment/instances/p1/events/order-paid/", VALID, format="json")
    assert response.status_code == 202, response.content
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert waiting.status()["output"] == {"order": 42, "amount": Decimal("12.30")}
    assert len(seen) == 2 and all(type(payload) is OrderPaid and payload == EXPECTED for payload in seen)
    # The inbox keeps the payload as it was sent.
    assert Event.objects.get(type="order-paid").payload == VALID


def test_python_code_may_send_the_models_instance(waiting, workflows_env):
    waiting.send_event(type="order-paid", payload=EXPECTED)
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert seen and all(payload == EXPECTED for payload in seen)
    assert waiting.status()["status"] == "complete"


@pytest.mark.parametrize(("payload", "path", "message"), [
    ({**VALID, "paid": {"amount": "12.30", "currency": "euro"}}, "$.paid.currency", "should match pattern"),
    ({**VALID, "paid": {"amount": "lots", "currency": "EUR"}}, "$.paid.amount", "valid decimal"),
    ({"order": 42}, "$.paid", "Field required"),
    ([1], "$", "valid dictionary or instance of OrderPaid"),
])
def test_a_payload_the_model_refuses_is_a_400_naming_the_path_and_stores_nothing(waiting, api, payload, path,
                                                                                   message):
    response = api.post("/workflows/awaits-payment/instances/p1/events/order-paid/", payload, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_payload"
    assert f"does not match its schema at {path}: " in error["message"] and message in error["message"], error
    assert not Event.objects.exists()
    assert waiting.status()["status"] == "waiting"


def test_the_openapi_document_shows_the_models_json_schema(waiting, api):
    document = api.get("/workflows/schema/", HTTP_ACCEPT="application/json").json()
    operation = document["paths"]["/workflows/awaits-payment/instances/{instance_id}/events/order-paid/"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["title"] == "OrderPaid" and body["required"] == ["order", "paid", "at"]
    assert body["properties"]["paid"] == {"$ref": "#/components/schemas/Money"}
    # The nested model is where the reference points.
    money = document["components"]["schemas"]["Money"]
    assert money["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"
    # The workflow's description lists the type with the same schema.
    events = {e["type"]: e for e in api.get("/workflows/awaits-payment/").json()["events"]}
    assert events["order-paid"]["schema"]["title"] == "OrderPaid"


def test_the_check_accepts_a_model_as_a_schema(waiting):
    assert not [m for m in check_workflows(None) if "awaits-payment" in m.msg or "AwaitsPayment" in m.msg]
