"""A concurrency limit across real worker processes: more processes than slots, and the limit holds."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from django_workflows import workflows
from django_workflows.models import Instance
from tests.testapp.models import ReplayAudit
from tests.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LIMIT = 5  # SlowSlotted.concurrency
INSTANCES = 100  # 20 rounds of five slots, at 0.8 s a replay


def _most_at_once(intervals) -> int:
    """The most intervals open at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda edge: (edge[0], edge[1]))
    most = open_now = 0
    for _, change in edges:
        open_now += change
        most = max(most, open_now)
    return most


def test_two_workers_with_eight_processes_never_run_more_than_the_limit(start_worker):
    handles = [workflows.get("slow-slotted").create(id=f"slot-{n}") for n in range(INSTANCES)]
    samples: list[int] = []
    stop = threading.Event()

    def sample():
        try:
            while not stop.is_set():
                samples.append(Instance.objects.filter(
                    workflow_name="slow-slotted", status__in=("running", "waitingForPause")).count())
                time.sleep(0.01)
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    # Two worker commands of four processes each: eight replays could run at once without the limit.
    start_worker(workers=4, name="limits-a")
    start_worker(workers=4, name="limits-b")
    try:
        wait_for(lambda: Instance.objects.filter(workflow_name="slow-slotted", status="complete").count()
                 == INSTANCES, 50, interval=0.2, message=f"{INSTANCES} instances to complete")
    finally:
        stop.set()
        sampler.join(5)
    took = time.monotonic() - started
    statuses = set(Instance.objects.filter(pk__in=[h.pk for h in handles]).values_list("status", flat=True))
    assert statuses == {"complete"}
    print(f"{INSTANCES} instances in {took:.1f} s, {len(samples)} samples, most running at once: {max(samples)}")
    assert len(samples) > 100
    assert max(samples) <= LIMIT
    # The replays as the engine's signals saw them (from just after the claim to just before the release),
    # in every worker process: never more than the limit at once, and the limit was reached.
    audited = list(ReplayAudit.objects.filter(instance_pk__in=[h.pk for h in handles], released__isnull=False)
                   .values_list("started", "released"))
    assert len(audited) >= INSTANCES
    assert _most_at_once(audited) == LIMIT
    assert len(set(ReplayAudit.objects.filter(instance_pk__in=[h.pk for h in handles])
                   .values_list("pid", flat=True))) > LIMIT
