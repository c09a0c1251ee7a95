"""The cluster watch's judgement of an unanswered probe (``ClusterWatch.progressing``): busy, or wedged.
tests/system/test_worker.py restarts real wedged clusters; here the judgement itself, on rows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_workflows.shared import clock
from django_workflows.surfaces.cluster import ClusterWatch
from django_workflows.models import Instance, InstanceStatus


@pytest.fixture
def watch(settings):
    settings.DJANGO_WORKFLOWS = {**getattr(settings, "DJANGO_WORKFLOWS", {}), "WEDGE_SECONDS": 4}
    return ClusterWatch("worker-1", workers=None)


def leased(seconds_ago: float) -> None:
    """An instance whose replay took its lease ``seconds_ago``."""
    now = clock.now()
    Instance.objects.create(workflow_name="three-steps", instance_id=f"took-{seconds_ago}", params={},
                            status=InstanceStatus.RUNNING, created_at=now - timedelta(minutes=1),
                            updated_at=now - timedelta(seconds=seconds_ago), lease_owner="elsewhere:1:x",
                            lease_expires_at=now + timedelta(minutes=5))


def test_a_lease_taken_lately_is_progress(db, watch):
    now = clock.now()
    leased(seconds_ago=2)
    assert watch.progressing(since=now - timedelta(seconds=20), now=now)


def test_a_lease_taken_after_the_probe_but_long_ago_is_not(db, watch):
    # The probe was sent 20 s ago; a replay took its lease just after it, 15 s ago, and froze there
    # holding SQLite's write lock: the probe can never be answered, and that one claim must not count
    # as the queue moving for ever, or the wedged cluster is never restarted.
    now = clock.now()
    leased(seconds_ago=15)
    assert not watch.progressing(since=now - timedelta(seconds=20), now=now)


def held_by_the_cluster(watch, monkeypatch, step_ended_seconds_ago: float) -> None:
    """An instance whose replay, in one of the cluster's processes, took its lease a minute ago, marked no
    progress from inside a body, and journaled a step that ended ``step_ended_seconds_ago``."""
    from django_workflows.models import Step, StepKind, StepStatus
    from django_workflows.store import holders

    monkeypatch.setattr(watch.process, "pids", lambda: [4242])
    now = clock.now()
    instance = Instance.objects.create(
        workflow_name="three-steps", instance_id="many-short-steps", params={}, status=InstanceStatus.RUNNING,
        created_at=now - timedelta(minutes=2), updated_at=now - timedelta(minutes=1),
        lease_owner=f"{holders.this_host()}:4242:x", lease_expires_at=now + timedelta(minutes=5))
    ended = now - timedelta(seconds=step_ended_seconds_ago)
    Step.objects.create(instance=instance, key="edge-92", name="edge", kind=StepKind.DO, status=StepStatus.FAILED,
                        started_at=ended - timedelta(milliseconds=5), ended_at=ended)


def test_a_step_its_replay_journaled_lately_is_progress(db, watch, monkeypatch):
    # A replay of a hundred 5 ms steps on a loaded machine: its lease taken once, no renewal inside a body,
    # yet a step journaled a second ago. Killing its cluster would run the replay again.
    held_by_the_cluster(watch, monkeypatch, step_ended_seconds_ago=1)
    now = clock.now()
    assert watch.progressing(since=now - timedelta(seconds=20), now=now)


def test_a_step_journaled_before_the_wedge_time_is_not(db, watch, monkeypatch):
    held_by_the_cluster(watch, monkeypatch, step_ended_seconds_ago=10)
    now = clock.now()
    assert not watch.progressing(since=now - timedelta(seconds=20), now=now)
