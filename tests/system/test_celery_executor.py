"""Replays on the Celery executor through real processes: ``celery -A tests.celery_app:<app> worker`` runs
them, on the Redis broker and on the RabbitMQ broker; ``workflows_worker --no-cluster`` beside it fires the
timers and runs the sweeper. Crashes, duplicate deliveries and timers, as tests/system/test_worker.py checks
them of the django-q2 cluster and tests/system/test_tasks_executor.py of the tasks executor."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from django_workflows import workflows
from django_workflows.executors import get_executor
from django_workflows.models import Instance
from django_workflows.shared.processes import EXITED, STATE, descendants, stat_fields
from tests.testapp.models import ReplayAudit, SideEffect
from tests.workers import assert_naps_resume_on_time, complete_quick, create_crashable, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

APPS = {"redis": "tests.celery_app.redis_app", "rabbitmq": "tests.celery_app.rabbitmq_app"}


@pytest.fixture(params=sorted(APPS))
def broker(request):
    """The Celery app of one broker, and a queue of this test's own on it: other runs on this machine
    share the RabbitMQ server and may share the Redis database, and must not take this test's replays."""
    from django.utils.module_loading import import_string

    app = import_string(APPS[request.param])
    queue = f"workflows-{uuid.uuid4().hex[:12]}"
    yield APPS[request.param], queue
    with app.connection_for_write() as connection:
        connection.default_channel.queue_delete(queue)


@pytest.fixture
def start(start_on, broker):
    """Start ``workflows_worker --no-cluster`` (``start("workflows_worker")``) or a Celery worker
    (``start("celery")``) of two pool processes consuming this test's queue, both on the Celery executor,
    as is this process."""
    app, queue = broker

    def celery_worker(name: str) -> list[str]:
        return ["-A", app.replace("tests.celery_app.", "tests.celery_app:"), "worker", "--queues", queue,
                "--hostname", f"{name}-{queue}@%h", "--pool", "prefork", "--concurrency", "2", "--loglevel", "INFO",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]

    return start_on({"EXECUTOR": "django_workflows.executors.celery.CeleryExecutor",
                     "EXECUTOR_OPTIONS": {"app": app, "queue": queue}}, celery_worker)


def pool_processes(worker) -> set[int]:
    return set(descendants(worker.pid)) - {worker.pid}


def running(pid: int) -> bool:
    """Whether the process runs still: an orphaned pool process killed is a zombie for a moment, until
    init reaps it."""
    try:
        return stat_fields(pid)[STATE] not in EXITED
    except OSError:
        return False


def test_the_celery_worker_runs_the_replays(start):
    start("workflows_worker")
    celery = start("celery")
    instances = complete_quick(5, 60)
    # The replays ran in the worker's pool processes, once each.
    assert set(ReplayAudit.objects.values_list("pid", flat=True)) <= pool_processes(celery)
    assert sorted(ReplayAudit.objects.values_list("instance_pk", flat=True)) == sorted(i.pk for i in instances)
    assert SideEffect.counts() == {f"quick-{n}:{step}": 1 for n in range(5) for step in ("one", "two", "three")}


def test_a_sleep_resumes_within_a_second_and_a_half_of_its_wake_time(start):
    start("workflows_worker")
    celery = start("celery")
    # A replay that starts before the worker is up would not be late, only its first wake time later:
    # wait for the worker, so that what is timed is the wake-up loop and the broker's delivery.
    wait_for(lambda: len(pool_processes(celery)) >= 2, 30, message="the Celery worker's pool to start")
    assert_naps_resume_on_time()


def test_sigkill_of_the_celery_worker_mid_step_resumes_the_instance(start, tmp_path):
    start("workflows_worker")
    celery = start("celery", name="celery-killed")
    instance, pid = create_crashable(tmp_path, "crash-1", 60)
    # The step runs in a pool process of the worker. The worker and its pool die together, as when a
    # container or a machine is killed.
    assert pid in pool_processes(celery)
    celery.kill_all()
    wait_for(lambda: not any(running(p) for p in (celery.pid, pid)), 10, message="the worker and its pool to die")
    # The sweeper of workflows_worker sees the lease's holder is gone from this host and sends a new
    # replay, which a worker started again (as a supervisor would) runs; the killed worker's own message,
    # unacknowledged, comes back too (at once on RabbitMQ) and finds the lease taken or the instance done.
    start("celery", name="celery-restarted")
    wait_status(instance, "complete", 60)
    # Finished steps did not run again; the interrupted one did.
    assert SideEffect.counts() == {"crash-1:before": 1, "crash-1:victim": 2, "crash-1:after": 1}
    assert Instance.objects.get(pk=instance.pk).crash_count == 0


def test_sigkill_of_a_pool_process_mid_step_resumes_the_instance_on_the_same_worker(start, tmp_path):
    start("workflows_worker")
    celery = start("celery")
    instance, pid = create_crashable(tmp_path, "crash-2", 60)
    assert pid in pool_processes(celery)
    # The OOM killer's way: one pool process dies, its worker lives on and starts another in its place.
    os.kill(pid, signal.SIGKILL)
    wait_status(instance, "complete", 60)
    assert SideEffect.counts() == {"crash-2:before": 1, "crash-2:victim": 2, "crash-2:after": 1}
    assert celery.process.poll() is None
    # The replay that finished the instance ran in the same worker, in another pool process.
    finisher = ReplayAudit.objects.filter(instance_pk=instance.pk).order_by("-pk").values_list("pid", flat=True)[0]
    assert finisher != pid and finisher in pool_processes(celery)


def test_a_replay_delivered_twice_runs_once(start):
    # Every instance's task is sent twice before any worker runs, then two workers take them at once: the
    # second delivery of each finds the lease taken, or the instance finished, and does nothing.
    instances = [workflows.get("long-step").create(id=f"twice-{n}", params={"seconds": 1}) for n in range(4)]
    for instance in instances:
        get_executor().enqueue_replay(instance.pk)
    start("workflows_worker")
    start("celery", name="celery-a")
    start("celery", name="celery-b")
    for instance in instances:
        wait_status(instance, "complete", 60)
    assert SideEffect.counts() == {f"twice-{n}:long": 1 for n in range(4)}
    # A replay is audited as released once its commit is done: a moment after its instance is seen complete.
    wait_for(lambda: not ReplayAudit.objects.filter(released=None).exists(), 10,
             message="every replay to be audited as released")
    # One replay took each instance's lease; no two replays of an instance overlapped.
    assert sorted(ReplayAudit.objects.values_list("instance_pk", flat=True)) == sorted(i.pk for i in instances)
