"""A step's declared result type (``result_type=``, or its function's return annotation): the journal keeps
what the step returned, and run() gets it as the declared type, on the first run and on every replay, in
def run and async def run alike (the engine suite's two flavours)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime
from decimal import Decimal

import pydantic
import pytest

from django_workflows import StepResultError, WorkflowEntrypoint, workflows
from django_workflows.errors import InvalidStepInput
from django_workflows.models import Instance, Step
from tests.testapp.models import SideEffect


@dataclasses.dataclass
class Quote:
    total: Decimal
    until: date
    lines: list[Decimal]


class Receipt(pydantic.BaseModel):
    number: int
    paid_at: datetime


seen: list[dict] = []
SENT = {"total": "9.90", "until": "2024-06-01", "lines": ["4.95", "4.95"]}


def quote_body() -> Quote:
    # Annotated: the annotation declares the type, though the body returns the plain dict.
    return SENT  # type: ignore[return-value]


class DeclaresResultTypes(WorkflowEntrypoint):
    name = "declares-result-types"

    def run(self, event, step):
        values = {
            "dataclass": step.do("quote", lambda: dict(SENT), result_type=Quote),
            "pydantic": step.do("receipt", lambda: {"number": 7, "paid_at": "2024-05-01T09:00:00+00:00"},
                                result_type=Receipt),
            "decimal": step.do("amount", lambda: "12.30", result_type=Decimal),
            "date": step.do("day", lambda: "2024-05-01", result_type=date),
            "generic": step.do("amounts", lambda: ["1.5", "2"], result_type=tuple[Decimal, ...]),
            "model": step.do("row", lambda: event.payload["row"], result_type=SideEffect),
            "annotated": step.do("annotated", quote_body),
        }

        @step.do("decorated")
        def decorated() -> Decimal:
            return "0.10"  # type: ignore[return-value]

        @step.do("decorated-with-type", result_type=Receipt)
        def decorated_with_type():
            return {"number": 8, "paid_at": "2024-05-02T09:00:00+00:00"}

        values["decorated"] = decorated()
        values["decorated_with_type"] = decorated_with_type()
        seen.append(values)
        # The replay after the nap reads every result from the journal.
        step.sleep("nap", "1 second")
        return {"total": values["dataclass"].total, "receipt": values["pydantic"].number}


EXPECTED = {
    "dataclass": Quote(Decimal("9.90"), date(2024, 6, 1), [Decimal("4.95"), Decimal("4.95")]),
    "pydantic": Receipt(number=7, paid_at=datetime(2024, 5, 1, 9, tzinfo=UTC)),
    "decimal": Decimal("12.30"),
    "date": date(2024, 5, 1),
    "generic": (Decimal("1.5"), Decimal("2")),
    "annotated": Quote(Decimal("9.90"), date(2024, 6, 1), [Decimal("4.95"), Decimal("4.95")]),
    "decorated": Decimal("0.10"),
    "decorated_with_type": Receipt(number=8, paid_at=datetime(2024, 5, 2, 9, tzinfo=UTC)),
}


@pytest.fixture(autouse=True)
def _clear():
    seen.clear()


def test_run_gets_the_declared_type_on_the_first_run_and_on_every_replay(workflows_env):
    row = SideEffect.objects.create(name="declared")
    instance = workflows.get("declares-result-types").create(params={"row": row.pk})
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert instance.status()["status"] == "complete", instance.status()
    assert len(seen) == 2, "a first run and a replay from the journal"
    for values in seen:
        model = values.pop("model")
        assert type(model) is SideEffect and model.pk == row.pk
        for name, expected in EXPECTED.items():
            assert type(values[name]) is type(expected) and values[name] == expected, name
        assert all(type(line) is Decimal for line in values["dataclass"].lines)
    assert instance.status()["output"] == {"total": Decimal("9.90"), "receipt": 7}

    # The journal keeps what each step returned, not the declared type: plain JSON stays plain.
    journaled = {step.name: step.result for step in Step.objects.filter(instance__instance_id=instance.id)}
    assert journaled["quote"] == SENT and journaled["amount"] == "12.30" and journaled["row"] == row.pk
    assert journaled["decorated"] == "0.10"


def test_the_declared_type_applies_after_a_restart_from_a_step(workflows_env):
    row = SideEffect.objects.create(name="declared")
    instance = workflows.get("declares-result-types").create(params={"row": row.pk})
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    seen.clear()
    instance.restart(from_step="amount")
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert instance.status()["status"] == "complete"
    assert seen and all(type(values["dataclass"]) is Quote and type(values["decimal"]) is Decimal
                        for values in seen)


class RefusesItsResult(WorkflowEntrypoint):
    name = "refuses-its-result"

    def run(self, event, step):
        calls = []

        def body():
            calls.append(1)
            return "twelve"

        try:
            step.do("amount", body, config={"retries": {"limit": 3, "delay": 0}}, result_type=Decimal)
        except StepResultError as exc:
            return {"error": str(exc), "calls": len(calls)}
        return {"error": None}


def test_a_value_that_cannot_become_the_declared_type_fails_the_step_for_good_naming_it(workflows_env):
    instance = workflows.get("refuses-its-result").create()
    workflows_env.run_until_idle()
    output = instance.status()["output"]
    assert "Step 'amount' returned a value that cannot be its declared result type Decimal" in output["error"]
    assert "str 'twelve' is not a decimal number" in output["error"]
    assert output["calls"] == 1, "not retried: the same body would return the same value"
    assert Step.objects.get(instance__instance_id=instance.id, name="amount").status == "failed"


class ChangesItsDeclaration(WorkflowEntrypoint):
    name = "changes-its-declaration"
    declared: type = str

    def run(self, event, step):
        value = step.do("value", lambda: "not a date", result_type=type(self).declared)
        step.sleep("nap", "1 second")
        return value


@pytest.mark.one_flavour("changes a class attribute between replays")
def test_a_journaled_value_that_no_longer_fits_its_declaration_is_a_clear_error_at_the_replay(workflows_env,
                                                                                                monkeypatch):
    instance = workflows.get("changes-its-declaration").create()
    workflows_env.run_until_idle()
    monkeypatch.setattr(ChangesItsDeclaration, "declared", date)
    workflows_env.advance("1 second")
    error = instance.status()["error"]
    assert error["name"] == "StepResultError"
    assert "Step 'value' returned a value that cannot be its declared result type date" in error["message"]
    # The journal is left as it was: declaring the type it holds again replays the instance.
    assert Step.objects.get(instance__instance_id=instance.id, name="value").result == "not a date"


class DeclaresNoType(WorkflowEntrypoint):
    name = "declares-no-type"

    def run(self, event, step):
        return step.do("value", lambda: 1, result_type="Decimal")


def test_a_result_type_that_is_not_a_type_is_refused_at_the_call(workflows_env):
    instance = workflows.get("declares-no-type").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == InvalidStepInput.__name__
    assert "step.do('value'): result_type must be a class" in error["message"]
    assert not Instance.objects.get(instance_id=instance.id).steps.exists()
