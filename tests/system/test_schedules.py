"""Cron schedules through real ``workflows_worker`` processes on PostgreSQL: two machines' workers
create each slot of a one-second schedule once, one of them SIGKILLed midway and started again."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from statistics import median

import pytest

from django_workflows.models import Instance, Schedule
from tests.workers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# The slots covered: 45 one-second slots stand in for three quarters of an hour of a minute's slots,
# a machine killed some 18 s in (CI's whole run must stay within its budget); TEST_SCHEDULE_SECONDS=300
# runs five real minutes of them.
SECONDS = float(os.environ.get("TEST_SCHEDULE_SECONDS", "45"))
ENV = {"TEST_SCHEDULE_EVERY_SECOND": "1"}


def created_slots() -> list[datetime]:
    params = Instance.objects.filter(workflow_name="every-second").values_list("params", flat=True)
    return sorted(datetime.fromtimestamp(p["scheduledTime"] / 1000, UTC) for p in params)


def sleep_into_a_round(offset: float = 0.004) -> None:
    """Sleep until just after the next whole second, when the workers run that slot's round (the
    database is on this machine, so its clock is this one's): a kill then likely lands inside one."""
    now = time.time()
    time.sleep(1 - (now % 1) + offset)


def test_two_workers_create_each_slot_once_with_one_sigkilled_midway(start_worker):
    machine_a = start_worker(name="machine-a", env=ENV)
    start_worker(name="machine-b", env=ENV)
    wait_for(lambda: Instance.objects.filter(workflow_name="every-second").exists(), 60, interval=0.2,
             message="the first scheduled instance")
    started = time.monotonic()

    time.sleep(SECONDS * 0.4)
    sleep_into_a_round()
    machine_a.kill_all()  # the command and its cluster, mid-round or not: nothing is given back
    killed_at = datetime.now(UTC)

    time.sleep(SECONDS * 0.3)
    start_worker(name="machine-a-again", env=ENV)  # a worker starting with the schedule's row made

    time.sleep(max(0.0, SECONDS - (time.monotonic() - started)))
    ended_at = datetime.now(UTC)  # the workers go on creating slots: what follows checks those until now

    slots = created_slots()
    first, last = slots[0], slots[-1]
    expected = [first + timedelta(seconds=n) for n in range(int((last - first).total_seconds()) + 1)]
    assert len(slots) == len(set(slots)), "a slot was created twice"
    assert slots[: len(expected)] == expected, f"missing slots: {sorted(set(expected) - set(slots))}"
    assert len(slots) >= SECONDS * 0.95
    assert first < killed_at - timedelta(seconds=5) and last > killed_at + timedelta(seconds=5)
    assert last >= ended_at - timedelta(seconds=3)

    rows = list(Instance.objects.filter(workflow_name="every-second")
                .values("instance_id", "params", "created_at"))
    key = Schedule.objects.get(workflow_name="every-second").key
    assert {row["instance_id"] for row in rows} == {f"cron-{key}-{slot:%Y%m%dT%H%M%SZ}" for slot in slots}
    lateness = [(row["created_at"] - datetime.fromisoformat(row["params"]["scheduled_time"])).total_seconds()
                for row in rows]
    print(f"{len(slots)} slots over {(last - first).total_seconds():.0f} s; created after their time: "
          f"median {median(lateness) * 1000:.1f} ms, max {max(lateness) * 1000:.1f} ms")
    assert max(lateness) < 60  # every slot on time: none was left to the catch-up policy

    # The replays the killed machine held were taken over: every instance completes with its slot.
    checked = Instance.objects.filter(workflow_name="every-second",
                                      instance_id__in=[row["instance_id"] for row in rows])
    wait_for(lambda: not checked.exclude(status="complete").exists(), 60, interval=0.5,
             message="every scheduled instance to complete")
    assert all(row.output == row.params["scheduledTime"] for row in checked)
