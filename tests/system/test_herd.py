"""The thundering herd: hundreds of instances due at the same moment, through two workflows_worker
commands sharing one PostgreSQL database, each replayed exactly once."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from django_workflows.shared import clock
from django_workflows.models import Instance, Step
from tests.testapp.models import ReplayAudit
from tests.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

HERD = 400


def sleepers(count: int, wake_at) -> list[int]:
    """``count`` napper instances asleep until ``wake_at``, each with its sleep's journal row, as a
    replay leaves them (epoch 1: one lease taken so far)."""
    now = clock.now()
    Instance.objects.bulk_create([
        Instance(workflow_name="napper", instance_id=f"herd-{n}", params={}, status="waiting",
                 wake_at=wake_at, epoch=1, current_step="nap-1", created_at=now, started_at=now,
                 updated_at=now)
        for n in range(count)
    ])
    pks = list(Instance.objects.filter(workflow_name="napper").order_by("pk").values_list("pk", flat=True))
    Step.objects.bulk_create([
        Step(instance_id=pk, key="nap-1", name="nap", kind="sleep", status="waiting",
             config={"duration": 1000}, wake_at=wake_at, started_at=now)
        for pk in pks
    ])
    return pks


def test_a_herd_due_at_once_through_two_worker_commands_is_replayed_once_each(start_worker):
    first = start_worker(name="machine-a", settings={"REPLAY_BATCH": 20})
    second = start_worker(name="machine-b", settings={"REPLAY_BATCH": 20})
    wake_at = clock.now() + timedelta(seconds=3)
    pks = sleepers(HERD, wake_at)
    unfinished = Instance.objects.filter(pk__in=pks, status__in=("waiting", "queued", "running"))
    wait_for(lambda: not unfinished.exists(), 120, interval=0.5, message=f"{HERD} instances to finish")
    assert first.process.poll() is None and second.process.poll() is None
    rows = Instance.objects.filter(pk__in=pks)
    assert Counter(rows.values_list("status", flat=True)) == {"complete": HERD}
    # Each lease taken bumps the epoch: one replay since the sleep means epoch 2, and a crash none.
    assert Counter(rows.values_list("epoch", flat=True)) == {2: HERD}
    assert Counter(rows.values_list("crash_count", flat=True)) == {0: HERD}
    # The replay audit of the workers: one replay started per instance, and it completed it.
    audited = Counter(ReplayAudit.objects.values_list("instance_pk", flat=True))
    assert audited == Counter(pks)
    assert Counter(ReplayAudit.objects.values_list("outcome", flat=True)) == {"complete": HERD}
    # The step after the sleep ran once per instance, after the wake time.
    woke = Step.objects.filter(instance_id__in=pks, key="woke-1", status="succeeded")
    assert woke.count() == HERD
    assert all(result["at"] >= wake_at.timestamp() for result in woke.values_list("result", flat=True))
