"""Replays on the tasks executor through real processes: ``manage.py db_worker`` (django-tasks-db) runs
them, ``workflows_worker --no-cluster`` beside it fires the timers and runs the sweeper. Crashes, duplicate
deliveries and timers, as tests/system/test_worker.py checks them of the django-q2 cluster."""

from __future__ import annotations

import os
import signal

import pytest
from django_tasks_db.models import DBTaskResult

from django_workflows import workflows
from django_workflows.executors import get_executor
from django_workflows.models import Instance
from tests.testapp.models import ReplayAudit, SideEffect
from tests.workers import assert_naps_resume_on_time, complete_quick, create_crashable, wait_for, wait_status

# CI's Django 6 pass runs this file: Django 6 builds the tasks framework in (django.tasks), Django 5.2 has
# the django-tasks backport.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.django_version]

TASKS_EXECUTOR = {"EXECUTOR": "django_workflows.executors.tasks.TasksExecutor",
                  "EXECUTOR_OPTIONS": {"backend": "workflows", "queue_name": "workflows"}}
# The worker looks for a task every 0.1 s when it has none: a replay starts at most that late.
DB_WORKER_ARGS = ["--backend", "workflows", "--queue-name", "workflows", "--interval", "0.1", "--no-startup-delay"]


@pytest.fixture
def start(start_on):
    """Start ``workflows_worker --no-cluster`` (``start("workflows_worker")``) or a ``db_worker``, both on
    the tasks executor, as is this process."""
    return start_on(TASKS_EXECUTOR, lambda name: DB_WORKER_ARGS)


def test_db_worker_runs_the_replays(start):
    start("workflows_worker")
    db_worker = start("db_worker")
    instances = complete_quick(5, 30)
    assert set(ReplayAudit.objects.values_list("pid", flat=True)) == {db_worker.pid}
    tasks = DBTaskResult.objects.all()
    # A task per instance, and a second one for an instance still queued after REDISPATCH_SECONDS (5 s
    # here): on a loaded machine the db_worker may take that long to start, and the sweeper then
    # enqueues the replay again, as it does for a task the broker lost. The second delivery finds the
    # instance done (test_a_replay_delivered_twice_runs_once), so each instance's replay ran once.
    assert {task.args_kwargs["args"][0] for task in tasks} == {i.pk for i in instances}
    assert sorted(ReplayAudit.objects.values_list("instance_pk", flat=True)) == sorted(i.pk for i in instances)
    # The worker marks a task successful after its replay has returned, so a moment after the instance
    # completes: the last task may still be "running" when the last instance is seen complete.
    wait_for(lambda: set(DBTaskResult.objects.values_list("status", flat=True)) == {"SUCCESSFUL"}, 10,
             message="every task to be marked successful")


def test_a_sleep_resumes_within_a_second_and_a_half_of_its_wake_time(start):
    start("workflows_worker")
    start("db_worker", name="db-worker-a")
    start("db_worker", name="db-worker-b")
    assert_naps_resume_on_time()


def test_sigkill_of_the_db_worker_mid_step_resumes_the_instance(start, tmp_path):
    start("workflows_worker")
    db_worker = start("db_worker", name="db-worker-killed")
    instance, pid = create_crashable(tmp_path, "crash-1", 30)
    # db_worker runs its tasks in its own process: the step dies with the worker.
    assert pid == db_worker.pid
    os.kill(pid, signal.SIGKILL)
    db_worker.process.wait(10)
    # The killed worker's task stays "running" for ever; the sweeper of workflows_worker sees the lease's
    # holder is gone from this host and enqueues a new replay, which a worker started again (as a
    # supervisor would) runs.
    start("db_worker", name="db-worker-restarted")
    wait_status(instance, "complete", 40)
    # Finished steps did not run again; the interrupted one did.
    assert SideEffect.counts() == {"crash-1:before": 1, "crash-1:victim": 2, "crash-1:after": 1}
    assert Instance.objects.get(pk=instance.pk).crash_count == 0
    # The first task is the killed worker's, "running" for ever; the replay that finished the instance
    # ran a later one, which the worker marks successful once the replay has returned.
    def statuses():
        return list(DBTaskResult.objects.order_by("enqueued_at").values_list("status", flat=True))

    wait_for(lambda: statuses()[0] == "RUNNING" and set(statuses()[1:]) == {"SUCCESSFUL"}, 10,
             message="the killed worker's task to stay running and the others to succeed")


def test_a_replay_delivered_twice_runs_once(start):
    # Every instance's task is enqueued twice before any worker runs, then two workers take them at
    # once: the second delivery of each finds the lease taken, or the instance finished, and does nothing.
    instances = [workflows.get("long-step").create(id=f"twice-{n}", params={"seconds": 1}) for n in range(4)]
    for instance in instances:
        get_executor().enqueue_replay(instance.pk)
    assert DBTaskResult.objects.count() == 8
    start("workflows_worker")
    start("db_worker", name="db-worker-a")
    start("db_worker", name="db-worker-b")
    for instance in instances:
        wait_status(instance, "complete", 60)
    wait_for(lambda: not DBTaskResult.objects.exclude(status="SUCCESSFUL").exists(), 30,
             message="every delivery to be run")
    assert SideEffect.counts() == {f"twice-{n}:long": 1 for n in range(4)}
    # One replay took each instance's lease; no two replays of an instance overlapped.
    assert sorted(ReplayAudit.objects.values_list("instance_pk", flat=True)) == sorted(i.pk for i in instances)
    assert all(row.released is not None for row in ReplayAudit.objects.all())
