"""Delayed starts and debounce through a real workflows_worker: its wake-up loop starts a scheduled
instance within a second of its time, and a burst of debounced triggers makes one instance."""

import pytest

from django_workflows import workflows
from django_workflows.models import Instance
from tests.workers import wait_status

pytestmark = pytest.mark.django_db(transaction=True)


# How late a start may be. An idle machine starts them within 0.1 s; CI runs three system passes at once on
# two cores, where a worker process can wait over a second for the CPU. A wake time that never reached the
# loop would wait for its next look, IDLE_RECHECK_SECONDS (30 s) away: a bound this far below it still tells.
LATE_BOUND = 5.0


def started_late(instance, wake_at: float) -> float:
    return instance.status()["output"]["at"] - wake_at


def test_start_in_instances_start_at_their_time_not_at_the_loops_next_look(start_worker):
    start_worker()
    # Created while the worker idles: each new wake time must reach its loop (NOTIFY on PostgreSQL, the
    # database file's change on SQLite), not wait for its next look.
    instances = [workflows.get("start-stamp").create(params={"n": n}, start_in=f"{2 + n * 0.3} seconds")
                 for n in range(5)]
    wake_times = [Instance.objects.get(pk=instance.pk).wake_at.timestamp() for instance in instances]
    assert {instance.status()["status"] for instance in instances} == {"scheduled"}
    for instance in instances:
        wait_status(instance, "complete", 30)
    lateness = [started_late(instance, wake_at) for instance, wake_at in zip(instances, wake_times, strict=True)]
    print(f"start lateness: {[round(late * 1000) for late in lateness]} ms")
    assert all(0 <= late <= LATE_BOUND for late in lateness), lateness


def test_20_debounced_triggers_in_a_second_make_one_instance_started_after_the_last(start_worker):
    import time

    start_worker()
    handles = []
    for n in range(20):
        handles.append(workflows.get("start-stamp").create(params={"n": n},
                                                            debounce={"key": "user-7", "period": "2 seconds"}))
        time.sleep(0.05)
    assert len(set(handles)) == 1 and Instance.objects.count() == 1
    wake_at = Instance.objects.get().wake_at.timestamp()
    wait_status(handles[0], "complete", 30)
    assert handles[0].status()["output"]["params"] == {"n": 19}
    assert 0 <= started_late(handles[0], wake_at) <= LATE_BOUND
    assert Instance.objects.count() == 1
