"""Long steps and steps that end as their timeout fires, through real workflows_worker processes.

A step may run up to its timeout: a cluster whose every worker is inside such a step is busy, not
wedged, and a step that holds a write transaction longer than the lease (on SQLite, the database's
write lock) keeps its lease. Neither may cost a restart, a second run of the body or a parked instance.
"""

from __future__ import annotations

import pytest

from django_workflows import workflows
from django_workflows.models import Instance, WorkerHeartbeat
from tests.testapp.models import ReplayAudit, SideEffect
from tests.workers import wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_step_longer_than_the_wedge_time_on_the_only_worker_completes_once(start_worker):
    # WEDGE_SECONDS is 4 (tests/workers.py): the probe stays unanswered for 12 s while the one worker
    # is inside the step.
    worker = start_worker(workers=1)
    # Created just as a probe is answered, so that the step starts before the next probe is sent: that
    # probe then waits for the step, unanswered, for all of its 12 s.
    answered = wait_for(lambda: WorkerHeartbeat.objects.filter(probe_answered_at__isnull=False).values_list(
        "probe_answered_at", flat=True).first(), 30, message="a probe answered")
    wait_for(lambda: WorkerHeartbeat.objects.filter(probe_answered_at__gt=answered).exists(), 10,
             message="the next probe answered")
    instance = workflows.get("long-step").create(id="long-12", params={"seconds": 12})
    wait_status(instance, "complete", 60)
    assert SideEffect.counts() == {"long-12:long": 1}
    assert ReplayAudit.objects.filter(instance_pk=instance.pk).count() == 1
    assert list(WorkerHeartbeat.objects.values_list("cluster_restarts", flat=True)) == [0]
    assert "restarting it" not in worker.output()


@pytest.mark.parametrize("own", [False, True], ids=["atomic-step", "own-transaction"])
def test_a_write_transaction_longer_than_the_lease_keeps_it(start_worker, own):
    # LEASE_SECONDS is 3 and POISON_LIMIT 2 (tests/workers.py); the body holds its transaction for 5 s.
    start_worker(workers=1)
    instance = workflows.get("long-transaction").create(id="long-write", params={"seconds": 5, "own": own})
    wait_status(instance, "complete", 60)
    assert instance.status()["output"] == 1
    assert SideEffect.counts() == {"long-write:write": 1}
    assert ReplayAudit.objects.filter(instance_pk=instance.pk).count() == 1
    assert Instance.objects.get(pk=instance.pk).crash_count == 0


def test_attempts_ending_as_their_timeout_fires_leave_nothing_armed(start_worker):
    worker = start_worker(workers=2)
    instances = [workflows.get("edge-of-timeout").create(id=f"edge-{n}", params={"attempts": 100, "seed": n})
                 for n in range(2)]
    for instance in instances:
        wait_status(instance, "complete", 90)
    assert [i.status()["output"]["stray_interruption"] for i in instances] == [False, False]
    # Each instance ran in one replay: no interruption escaped it, to leave it running or to land in the
    # journal's statements, and no worker process was lost to one.
    assert sorted(ReplayAudit.objects.values_list("instance_pk", flat=True)) == sorted(i.pk for i in instances)
    # A watch left armed interrupts its thread again a second later, wherever it is by then.
    wait_status(workflows.get("quick").create(id="after-the-edges"), "complete", 30)
    import time
    time.sleep(2.5)
    output = worker.output()
    assert "AttemptTimedOut" not in output
    assert "reincarnated" not in output.lower()
    timed_out = sum(i.status()["output"]["timed_out"] for i in instances)
    print(f"edge of timeout: {timed_out} of 200 attempts timed out")
    assert 0 < timed_out < 200


def test_a_long_step_whose_worker_keeps_dying_is_not_parked_as_poison(start_worker):
    """Its worker is killed three times inside the step, each time after the step renewed its lease:
    the step was running, which is progress, so the deaths are not counted toward poison (POISON_LIMIT
    is 2), and the fourth run completes it."""
    import os
    import signal
    import time

    from django_workflows.store.holders import Holder

    start_worker(workers=1)
    instance = workflows.get("long-step").create(id="killed", params={"seconds": 6})
    for run in range(1, 4):
        wait_for(lambda run=run: SideEffect.counts().get("killed:long") == run, 30,
                 message=f"run {run} of the step")
        # LEASE_SECONDS is 3: the keeper renews the lease, from inside the step, within 1.5 s.
        time.sleep(2.5)
        row = Instance.objects.get(pk=instance.pk)
        assert row.progressed_at is not None
        os.kill(Holder.parse(row.lease_owner).pid, signal.SIGKILL)
    wait_status(instance, "complete", 60)
    assert SideEffect.counts() == {"killed:long": 4}
    assert Instance.objects.get(pk=instance.pk).crash_count == 0
