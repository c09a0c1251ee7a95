"""A worker that starts reclaims at once the leases of its host's dead processes; other leases expire.

LEASE_SECONDS stays at 60 in these tests: whatever resumes within seconds was reclaimed, not expired.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from django_workflows import workflows
from django_workflows.shared import clock, processes
from django_workflows.foundations.control_flow import Fenced
from django_workflows.models import Instance, WorkerHeartbeat
from django_workflows.store import holders
from django_workflows.store.dispatch import reclaim_dead_leases
from django_workflows.store.journal import JournalWriter
from tests.testapp.models import SideEffect
from tests.workers import wait_for, wait_status

LONG_LEASE = {"LEASE_SECONDS": 60}


def dead_holder() -> holders.Holder:
    """A holder of this host whose process ran and exited (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = processes.stat_fields(child.pid)[processes.START_TICKS]
    finally:
        child.kill()
        child.wait()
    return holders.Holder(holders.this_host(), child.pid, start, 1)


def lease(instance, holder, *, status: str = "running") -> None:
    """Put the instance in the state a replay leaves it in while it runs under ``holder``."""
    now = clock.now()
    Instance.objects.filter(pk=instance.pk).update(
        status=status, lease_owner=str(holder), lease_expires_at=now + timedelta(seconds=60), epoch=1,
        started_at=now,
    )


def held_by(instance) -> tuple[str, str, int]:
    row = Instance.objects.get(pk=instance.pk)
    return row.status, row.lease_owner, row.crash_count


def two_more_sweeps() -> None:
    """Wait until the running worker has swept twice more (it writes its heartbeat at each sweep)."""
    seen = set()

    def two_more():
        seen.add(WorkerHeartbeat.objects.values_list("last_seen", flat=True).first())
        return len(seen) >= 3

    wait_for(two_more, 10, message="two more sweeps")


@pytest.mark.django_db(transaction=True)
def test_a_worker_restarted_after_sigkill_resumes_the_interrupted_instance_at_once(start_worker, tmp_path):
    first = start_worker(settings=LONG_LEASE)
    marker = tmp_path / "victim.pid"
    instance = workflows.get("crashable").create(id="reclaim-1", params={"marker": str(marker)})
    victim = int(wait_for(lambda: marker.exists() and marker.read_text(), 30, message="the victim step"))
    assert holders.Holder.parse(Instance.objects.get(pk=instance.pk).lease_owner).pid == victim
    first.kill_all()

    restarted = time.monotonic()
    start_worker(settings=LONG_LEASE)
    # The killed process's lease has about 60 s to go: only a reclaim resumes it this soon.
    wait_status(instance, "complete", 10)
    print(f"resumed and completed {time.monotonic() - restarted:.1f} s after the restart")
    # Finished steps did not run again; the interrupted one did.
    assert SideEffect.counts() == {"reclaim-1:before": 1, "reclaim-1:victim": 2, "reclaim-1:after": 1}


@pytest.mark.django_db(transaction=True)
def test_leases_of_other_hosts_are_left_to_expire(start_worker):
    hostname = socket.gethostname()
    gone = dead_holder()
    _, boot, namespace = holders.this_host().split("/")
    elsewhere = {
        "another host name": dataclasses.replace(gone, host=f"not-{hostname}/{boot}/{namespace}"),
        # Containers sharing the host name (host networking) each see their own process ids.
        "another PID namespace": dataclasses.replace(gone, host=f"{hostname}/{boot}/1"),
        "another boot": dataclasses.replace(gone, host=f"{hostname}/000000000000/{namespace}"),
    }
    quick = workflows.get("quick")
    here = quick.create(id="here")
    lease(here, gone)
    others = {why: quick.create(id=f"elsewhere-{n}") for n, why in enumerate(elsewhere)}
    for why, instance in others.items():
        lease(instance, elsewhere[why])

    start_worker(settings=LONG_LEASE)
    # The lease of this host's dead process is reclaimed at once, which shows the worker looked ...
    wait_status(here, "complete", 10)
    two_more_sweeps()
    # ... and the same dead process id, named by another host, was left alone.
    for why, instance in others.items():
        assert held_by(instance) == ("running", str(elsewhere[why]), 0), why


@pytest.mark.django_db(transaction=True)
def test_the_lease_of_a_live_process_is_not_reclaimed(start_worker):
    quick = workflows.get("quick")
    live = quick.create(id="live")
    lease(live, holders.holder())  # this test's own process, running
    # The same process id with another start time: the id was given to this process since.
    reused = quick.create(id="reused")
    lease(reused, dataclasses.replace(holders.holder(), start="1"))

    start_worker(settings=LONG_LEASE)
    wait_status(reused, "complete", 10)
    two_more_sweeps()
    assert held_by(live) == ("running", str(holders.holder()), 0)


def test_a_reclaimed_lease_is_requeued_as_the_sweeper_does_and_its_holder_fenced(workflows_env):
    running = workflows.get("three-steps").create()
    pausing = workflows.get("three-steps").create()
    alive = workflows.get("three-steps").create()
    workflows_env.executor.reset()
    gone = dead_holder()
    lease(running, gone)
    lease(pausing, dataclasses.replace(gone, thread=2), status="waitingForPause")
    lease(alive, holders.holder())

    assert reclaim_dead_leases() == 1
    row = Instance.objects.get(pk=running.pk)
    assert (row.status, row.crash_count, row.lease_owner, row.lease_expires_at) == ("queued", 1, "", None)
    assert row.epoch == 2
    assert Instance.objects.get(pk=pausing.pk).status == "paused"
    assert held_by(alive) == ("running", str(holders.holder()), 0)
    assert list(workflows_env.executor.queue) == [running.pk]
    # Should the dead holder's replay still be running somewhere, its next write is refused.
    with pytest.raises(Fenced):
        JournalWriter(running.pk, 1).insert(key="late-1", name="late", kind="do", status="succeeded")
    assert reclaim_dead_leases() == 0  # reclaimed once only
    workflows_env.run_until_idle()
    assert running.status()["status"] == "complete"
