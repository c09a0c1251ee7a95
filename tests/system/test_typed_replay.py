"""Typed values through real worker processes: an instance with typed params (Decimal, an aware datetime, a
UUID, a model instance, a dataclass) and typed step results runs on one workflows_worker, which is killed
(SIGKILL of its whole process group) in the middle of a step; another workflows_worker replays it, and
run() sees the same types, and the same values, before and after."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from uuid import UUID

import pytest

from django_workflows import workflows
from tests.testapp.models import SideEffect
from tests.testapp.typed_workflows import Shipment
from tests.workers import wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED_TYPES = {
    "total": "decimal.Decimal",
    "at": "datetime.datetime",
    "id": "uuid.UUID",
    "row": "tests.testapp.models.SideEffect",
    "quote": "tests.testapp.typed_workflows.Shipment",
    "shipment": "tests.testapp.typed_workflows.Shipment",
    "weight": "decimal.Decimal",
    "price": "decimal.Decimal",
}


@pytest.mark.django_version
def test_run_sees_the_same_types_before_a_worker_is_killed_and_after_another_replays_it(start_worker, tmp_path):
    first = start_worker(name="first")
    marker, seen = tmp_path / "victim.pid", tmp_path / "seen.jsonl"
    row = SideEffect.objects.create(name="typed-row")
    at = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    instance = workflows.get("typed-crashable").create(id="typed-1", params={
        "total": Decimal("12.30"), "at": at, "id": UUID("12345678-1234-5678-1234-567812345678"), "row": row,
        "quote": Shipment(Decimal("0.50"), (3,)), "seen": str(seen), "marker": str(marker)})
    victim = int(wait_for(lambda: marker.exists() and marker.read_text(), 60, message="the victim step to start"))
    first.kill_all()

    second = start_worker(name="second")
    wait_status(instance, "complete", 60)
    assert instance.status()["output"] == {"total": Decimal("24.60"), "at": at, "row": row.pk}

    replays = [json.loads(line) for line in seen.read_text().splitlines()]
    before = [r for r in replays if r["pid"] == victim]
    after = [r for r in replays if r["pid"] != victim]
    assert len(before) == 1 and after, replays
    # The replay after the kill ran in another worker's process, from the journal the first one wrote.
    assert all(r["pid"] not in (victim, first.pid, second.pid) for r in after)
    for replay in replays:
        assert replay["types"] == EXPECTED_TYPES, replay
        assert replay["values"] == before[0]["values"], replay
    assert before[0]["values"]["weight"] == repr(Decimal("3.075"))
    # The victim step ran again after the kill, in the second worker.
    assert SideEffect.counts()["typed-1:victim"] == 2
