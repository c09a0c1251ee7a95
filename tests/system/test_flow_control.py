"""Keyed limits, priorities and queues through real worker processes (tests/testapp/flow_control.py)."""

from __future__ import annotations

import time

import pytest

from django_workflows import workflows
from django_workflows.models import Instance, Step
from tests.system.test_limits import _most_at_once
from tests.testapp.models import ReplayAudit
from tests.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_customers_of_fifty_run_one_at_a_time_each_and_both_finish(start_worker):
    handles = {customer: [workflows.get("per-customer").create(params={"customer_id": customer, "seconds": 0.02})
                          for _ in range(50)] for customer in ("acme", "globex")}
    # Four processes: without the key's limit, four replays of one customer could run at once.
    start_worker(workers=4, name="per-customer")
    wait_for(lambda: Instance.objects.filter(workflow_name="per-customer", status="complete").count() == 100,
             90, interval=0.2, message="both customers' 100 instances to complete")
    at_once = {}
    for customer, created in handles.items():
        audited = list(ReplayAudit.objects.filter(instance_pk__in=[h.pk for h in created], released__isnull=False)
                       .values_list("started", "released"))
        assert len(audited) >= 50
        at_once[customer] = _most_at_once(audited)
    assert at_once == {"acme": 1, "globex": 1}
    # The two customers did run side by side: the limit is per customer, not for the workflow.
    everyone = list(ReplayAudit.objects.filter(instance_pk__in=[h.pk for c in handles.values() for h in c],
                                               released__isnull=False).values_list("started", "released"))
    assert _most_at_once(everyone) == 2


def test_a_priority_9_instance_created_behind_500_queued_ones_starts_first(start_worker):
    backlog = []
    for _ in range(5):
        backlog += workflows.get("errand").create_batch([{} for _ in range(100)])
    urgent = workflows.get("errand").create(priority=9)
    # One replay at a time (on PostgreSQL a task's replays otherwise run on four threads), so that "first"
    # is one instance, not the first wave of four.
    start_worker(workers=1, name="priorities", settings={"REPLAY_THREADS": 1})
    wait_for(lambda: Instance.objects.filter(pk=urgent.pk, status="complete").exists(), 60,
             message="the priority-9 instance to complete")
    first = Instance.objects.get(pk=urgent.pk).started_at
    before = Instance.objects.filter(pk__in=[h.pk for h in backlog], started_at__lte=first)
    assert list(before.values_list("instance_id", flat=True)) == []


def test_a_worker_serving_the_heavy_queue_never_runs_a_default_instance(start_worker):
    ordinary = [workflows.get("errand").create() for _ in range(5)]
    light = workflows.get("heavy-lifting").create(queue="default")
    heavy = [workflows.get("heavy-lifting").create() for _ in range(5)]
    start_worker(workers=2, name="heavy", extra_args=["--queues", "heavy"])
    wait_for(lambda: Instance.objects.filter(pk__in=[h.pk for h in heavy], status="complete").count() == 5, 60,
             message="the heavy queue's instances to complete")
    time.sleep(2)  # a few of its sweeps, and time for any delivery of the default queue to be taken
    untouched = [*ordinary, light]
    rows = Instance.objects.filter(pk__in=[h.pk for h in untouched])
    assert {(row.status, row.epoch) for row in rows} == {("queued", 0)}
    assert not ReplayAudit.objects.filter(instance_pk__in=[h.pk for h in untouched]).exists()
    # A worker serving both queues runs them.
    start_worker(workers=2, name="both", extra_args=["--queues", "heavy,default"])
    wait_for(lambda: Instance.objects.filter(pk__in=[h.pk for h in untouched], status="complete").count() == 6, 60,
             message="the default queue's instances to complete")


def test_an_instance_its_keys_limit_holds_back_ends_at_its_deadline_while_the_slot_stays_taken(start_worker):
    # The worker learns of the held instance's wake time (its deadline) as it learns of any other: PostgreSQL's
    # trigger notifies its wake-up loop, SQLite's log changes under its watch.
    busy = workflows.get("per-customer").create(params={"customer_id": "acme", "seconds": 20})
    worker = start_worker(workers=2, name="held-back")
    wait_for(lambda: Instance.objects.filter(pk=busy.pk, status="running").exists(), 60,
             message="the first instance to take acme's one slot")
    held = workflows.get("per-customer").create(params={"customer_id": "acme"}, timeout="2 seconds")
    wait_for(lambda: Instance.objects.filter(pk=held.pk, status="errored").exists(), 60,
             message="the held instance to reach its deadline")
    # Its end did not wait for the slot: the first instance still holds it.
    assert Instance.objects.get(pk=busy.pk).status == "running"
    assert held.status()["error"]["name"] == "WorkflowTimeoutError"
    assert not Step.objects.filter(instance_id=held.pk).exists()
    busy.terminate()
    # Stopped gracefully, the worker would first finish the busy instance's 20-second step.
    worker.kill_all()
