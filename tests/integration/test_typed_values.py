"""Typed values round-trip: every type docs/guide/typed-values.md lists, through params, a step result, an
event's payload, a child's result and the output, the same value of the same type on the first run, on
every replay and after restart(from_step); journaled in the tagged form, readable in the admin and the API."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from uuid import UUID

import pydantic
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from django_workflows import StoredObjectMissing, WorkflowEntrypoint, workflows
from django_workflows.models import Instance, Step
from tests.testapp.models import SideEffect


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Quote:
    total: Decimal
    until: date


class Order(pydantic.BaseModel):
    number: int
    placed: datetime


def _row():
    return SideEffect.objects.get_or_create(name="typed")[0]


CASES = {
    "datetime": lambda: datetime(2024, 5, 1, 9, 30, 15, 123, tzinfo=UTC),
    "date": lambda: date(2024, 5, 1),
    "time": lambda: time(9, 30),
    "timedelta": lambda: timedelta(days=3, microseconds=7),
    "decimal": lambda: Decimal("12.30"),
    "uuid": lambda: UUID("12345678-1234-5678-1234-567812345678"),
    "bytes": lambda: b"\x00\xffabc",
    "set": lambda: {3, 1, 2},
    "frozenset": lambda: frozenset({"a"}),
    "tuple": lambda: (1, "two", (3.5,)),
    "dataclass": lambda: Quote(Decimal("9.99"), date(2024, 6, 1)),
    "pydantic": lambda: Order(number=7, placed=datetime(2024, 5, 1, tzinfo=UTC)),
    "enum": lambda: Colour.RED,
    "model": _row,
    "nested": lambda: {"items": [Decimal("1.5"), {"$type": "mine", "at": date(2024, 1, 1)}], 2: (None,)},
}

seen: list[dict] = []


class TypedMatrix(WorkflowEntrypoint):
    name = "typed-matrix"

    def run(self, event, step):
        case = event.payload["case"]
        result = step.do("result", lambda: CASES[case]())
        received = step.wait_for_event("event", "typed", timeout="1 hour")
        child = step.child("child", "typed-child", params={"value": event.payload["value"]})
        values = {"params": event.payload["value"], "result": result, "event": received.payload, "child": child}
        seen.append(values)
        # The replay after the nap reads every value from the journal.
        step.sleep("nap", "1 second")
        return values


class TypedChild(WorkflowEntrypoint):
    name = "typed-child"

    def run(self, event, step):
        return step.do("echo", lambda: event.payload["value"])


def same(a, b) -> bool:
    """Equal, and of the same type all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


@pytest.fixture(autouse=True)
def _clear():
    seen.clear()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_type_round_trips_through_params_a_step_an_event_a_child_and_the_output(case, workflows_env):
    value = CASES[case]()
    instance = workflows.get("typed-matrix").create(params={"case": case, "value": value})
    workflows_env.run_until_idle()
    instance.send_event(type="typed", payload=value)
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    expected = {"params": value, "result": value, "event": value, "child": value}
    status = instance.status()
    assert status["status"] == "complete", status
    assert same(status["output"], expected)
    # The first run, fresh from each step, and the replay from the journal saw the same values and types.
    assert len(seen) >= 2 and all(same(values, expected) for values in seen)

    seen.clear()
    instance.restart(from_step="result")
    workflows_env.run_until_idle()
    instance.send_event(type="typed", payload=value)
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert same(instance.status()["output"], expected)
    assert len(seen) >= 2 and all(same(values, expected) for values in seen)


@pytest.mark.one_flavour("reads the journal, runs nothing new")
def test_the_journal_keeps_the_tagged_form_readable_in_the_admin_and_the_api(workflows_env, client):
    value = Quote(Decimal("9.99"), date(2024, 6, 1))
    instance = workflows.get("typed-matrix").create(id="t1", params={"case": "dataclass", "value": value})
    workflows_env.run_until_idle()
    instance.send_event(type="typed", payload={"$type": "not a tag", "n": 1})
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    tagged = {"$type": "dataclass", "class": "tests.integration.test_typed_values:Quote",
              "value": {"total": {"$type": "decimal", "value": "9.99"},
                        "until": {"$type": "date", "value": "2024-06-01"}}}
    row = Instance.objects.get(instance_id="t1")
    assert row.params["value"] == tagged
    assert Step.objects.get(instance=row, name="result").result == tagged
    # The sender's own "$type" is escaped, never read as a tag.
    assert Step.objects.get(instance=row, name="event").result["payload"] == {
        "$type": "dict", "value": {"$type": "not a tag", "n": 1}}
    assert instance.status()["output"]["event"] == {"$type": "not a tag", "n": 1}

    admin = User.objects.create_superuser("admin", "a@example.com", "pw")
    api = APIClient()
    api.force_authenticate(admin)
    described = api.get("/workflows/typed-matrix/instances/t1/").json()
    assert described["params"]["value"] == tagged
    assert described["output"]["result"] == tagged

    client.force_login(admin)
    page = client.get(f"/admin/django_workflows/instance/{row.pk}/change/").content.decode()
    assert "&quot;$type&quot;: &quot;decimal&quot;" in page and "&quot;value&quot;: &quot;9.99&quot;" in page


class ReadsItsOrder(WorkflowEntrypoint):
    name = "reads-its-order"

    def run(self, event, step):
        try:
            order = step.do("order", lambda: _row())
            # Replayed after the nap, the step's result is read again: the row is gone by then.
            step.sleep("nap", "1 second")
            return order.name
        except StoredObjectMissing as exc:
            return f"gone: {exc.model} {exc.pk}"


def test_a_deleted_row_is_a_clear_error_where_run_reads_it(workflows_env):
    row = _row()
    instance = workflows.get("typed-matrix").create(params={"case": "model", "value": row})
    other = workflows.get("reads-its-order").create()
    workflows_env.run_until_idle()
    pk = row.pk
    row.delete()
    workflows_env.advance("1 second")
    assert other.status()["output"] == f"gone: testapp.sideeffect {pk}"
    instance.send_event(type="typed", payload=1)
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "StoredObjectMissing"
    assert f"testapp.SideEffect with pk {pk} was stored in the journal and has since been deleted" in error["message"]
