"""Many instances runnable at once: the wake-up loop's statements, tasks that carry several replays, and
each of those replays standing alone."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows import workflows
from django_workflows.shared import clock

from django_workflows.engine import replay_tasks
from django_workflows.executors.base import REPLAY_TASK, REPLAYS_TASK
from django_workflows.executors.q2 import DjangoQExecutor, batches
from django_workflows.models import Instance
from django_workflows.store.dispatch import sweep, wake_due


def queued_tasks() -> list[tuple[str, list[int]]]:
    """The django-q2 tasks on the ORM queue, oldest first, as (function, instance pks)."""
    from django_q.models import OrmQ

    found = []
    for row in OrmQ.objects.order_by("id"):
        task = row.task
        pks = task["args"][0]
        found.append((task["func"], pks if isinstance(pks, list) else [pks]))
    return found


def sleepers(count: int, wake_at) -> list[int]:
    now = clock.now()
    Instance.objects.bulk_create([
        Instance(workflow_name="napper", instance_id=f"nap-{n}", status="waiting", wake_at=wake_at, epoch=1,
                 created_at=now, updated_at=now)
        for n in range(count)
    ])
    return list(Instance.objects.filter(workflow_name="napper").order_by("pk").values_list("pk", flat=True))


@pytest.mark.parametrize(("count", "workers", "batch", "sizes"), [
    (1, 2, 20, [1]),
    (3, 2, 20, [1, 1, 1]),
    (4, 2, 20, [1, 1, 1, 1]),
    (10, 2, 20, [3, 3, 2, 2]),
    (100, 2, 20, [20] * 5),
    (101, 2, 20, [17, 17, 17, 17, 17, 16]),
    (100, 8, 20, [7] * 4 + [6] * 12),
    (5, 2, 1, [1] * 5),
])
def test_replays_are_split_into_as_few_tasks_as_the_batch_allows_yet_spread_over_the_workers(
        settings, monkeypatch, count, workers, batch, sizes):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "WORKERS", workers)
    settings.DJANGO_WORKFLOWS = {"REPLAY_BATCH": batch}
    pks = list(range(1000, 1000 + count))
    chunks = batches(pks)
    assert [len(chunk) for chunk in chunks] == sizes
    assert [pk for chunk in chunks for pk in chunk] == pks


@pytest.mark.django_db(transaction=True)
def test_waking_many_due_instances_takes_one_claim_and_one_task_per_batch(settings, monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "WORKERS", 2)
    settings.DJANGO_WORKFLOWS = {"REPLAY_BATCH": 20}
    assert DjangoQExecutor().enqueues_in_transaction  # the ORM broker on the workflows' database
    pks = sleepers(200, clock.now() - timedelta(seconds=1))
    with CaptureQueriesContext(connection) as ctx:
        assert wake_due() == 200
    # Transaction control (SQLite's BEGIN IMMEDIATE and COMMIT) left out: the same for any count.
    statements = [q["sql"] for q in ctx.captured_queries
                  if not q["sql"].startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"))]
    claims = [sql for sql in statements if sql.startswith("UPDATE") and "django_workflows_instance" in sql]
    inserts = [sql for sql in statements if sql.startswith("INSERT") and "django_q_ormq" in sql]
    # One claim of the 200 (WAKE_BATCH is 500), one INSERT per task of 20: not one per instance.
    assert (len(claims), len(inserts)) == (1, 10)
    # And one read of the queues the 200 are routed to, since the test project has a queue beside the
    # default one (a project with the default queue alone makes none).
    assert len(statements) == 12, statements
    found = queued_tasks()
    assert {func for func, _ in found} == {REPLAYS_TASK}
    assert sorted(pk for _, chunk in found for pk in chunk) == pks
    assert set(Instance.objects.values_list("status", flat=True)) == {"queued"}


@pytest.mark.django_db(transaction=True)
def test_a_few_due_instances_get_a_task_each(settings, monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "WORKERS", 2)
    pks = sleepers(3, clock.now() - timedelta(seconds=1))
    assert wake_due() == 3
    assert queued_tasks() == [(REPLAY_TASK, [pk]) for pk in pks]


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_queues_lost_replays_again_in_batches(settings, monkeypatch):
    from django_q.conf import Conf
    from django_q.models import OrmQ

    monkeypatch.setattr(Conf, "WORKERS", 1)
    settings.DJANGO_WORKFLOWS = {"REPLAY_BATCH": 20}
    pks = sleepers(60, clock.now() - timedelta(seconds=1))
    assert wake_due() == 60
    OrmQ.objects.all().delete()  # the tasks were lost (a Redis broker's worker died holding them)
    Instance.objects.update(updated_at=clock.now() - timedelta(minutes=5))
    assert sweep() == 60
    found = queued_tasks()
    assert [len(chunk) for _, chunk in found] == [20, 20, 20]
    assert sorted(pk for _, chunk in found for pk in chunk) == pks


@pytest.mark.django_db(transaction=True)
def test_create_batch_queues_its_first_replays_in_batches(settings, monkeypatch):
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "WORKERS", 2)
    settings.DJANGO_WORKFLOWS = {"REPLAY_BATCH": 20}
    handles = workflows.get("three-steps").create_batch([{} for _ in range(100)])
    found = queued_tasks()
    assert [len(chunk) for _, chunk in found] == [20] * 5
    assert sorted(pk for _, chunk in found for pk in chunk) == sorted(h.pk for h in handles)


def test_a_task_of_several_replays_runs_each_once(workflows_env):
    created = [workflows.get("three-steps").create() for _ in range(3)]
    workflows_env.executor.reset()
    pks = [instance.pk for instance in created]
    replay_tasks.run_replays([*pks, pks[0]])  # a duplicate of the first: its lease lets one replay through
    for instance in created:
        row = Instance.objects.get(pk=instance.pk)
        assert (row.status, row.epoch) == ("complete", 1)
    assert list(workflows_env.executor.queue) == []


def test_a_replay_that_fails_leaves_the_others_of_its_task_alone(workflows_env, monkeypatch, caplog):
    created = [workflows.get("three-steps").create() for _ in range(3)]
    workflows_env.executor.reset()
    pks = [instance.pk for instance in created]
    real = replay_tasks.replay

    def failing(pk):
        if pk == pks[1]:
            raise RuntimeError("the database went away")
        return real(pk)

    monkeypatch.setattr(replay_tasks, "replay", failing)
    replay_tasks.run_replays(pks)
    statuses = [Instance.objects.get(pk=pk).status for pk in pks]
    # The failed one is left queued, for the sweeper to queue again (REDISPATCH_SECONDS).
    assert statuses == ["complete", "queued", "complete"]
    assert f"The replay of instance {pks[1]} failed" in caplog.text


def test_a_task_past_its_time_hands_the_rest_on_as_another(workflows_env, monkeypatch):
    created = [workflows.get("three-steps").create() for _ in range(4)]
    workflows_env.executor.reset()
    pks = [instance.pk for instance in created]
    monkeypatch.setattr(replay_tasks, "BATCH_SECONDS", 0.0)
    replay_tasks.run_replays(pks)
    # The first ran; the others went back to the executor, not dropped, and ran nowhere yet.
    assert Instance.objects.get(pk=pks[0]).status == "complete"
    assert [Instance.objects.get(pk=pk).status for pk in pks[1:]] == ["queued"] * 3
    assert list(workflows_env.executor.queue) == pks[1:]
    workflows_env.run_until_idle()
    assert {Instance.objects.get(pk=pk).status for pk in pks} == {"complete"}


@pytest.mark.django_db(transaction=True)
def test_a_task_spreads_its_replays_over_threads_where_the_database_takes_concurrent_writers(settings):
    from django_workflows.executors import pop_override, push_override
    from django_workflows.signals import replay_started
    from django_workflows.testing import RecordingExecutor

    settings.DJANGO_WORKFLOWS = {"REPLAY_THREADS": 3}
    executor = RecordingExecutor()
    push_override(executor)
    threads: dict[int, int] = {}

    def started(instance_pk, **kwargs):
        import threading

        threads[instance_pk] = threading.get_ident()

    replay_started.connect(started, dispatch_uid="test-threads")
    try:
        handles = workflows.get("three-steps").create_batch([{} for _ in range(7)])
        pks = [handle.pk for handle in handles]
        replay_tasks.run_replays([*pks, pks[0]])  # a duplicate: its lease lets one replay through
    finally:
        replay_started.disconnect(dispatch_uid="test-threads")
        pop_override()
    rows = Instance.objects.filter(pk__in=pks)
    assert set(rows.values_list("status", "epoch")) == {("complete", 1)}
    assert sorted(threads) == sorted(pks)
    # SQLite takes one writer at a time: there they ran one after another, in this thread.
    assert len(set(threads.values())) == (1 if connection.vendor == "sqlite" else 3)


def test_lanes_are_sized_to_the_cores_unless_set(settings, monkeypatch):
    """4 by default; with REPLAY_THREADS None, two replays in flight per core, shared among the processes of the machine that run replays (a
    django-q2 cluster's workers; one per core for an executor that does not know); REPLAY_THREADS wins."""
    import os

    from django_q.conf import Conf

    from django_workflows.surfaces import checks
    from django_workflows.executors import pop_override, push_override
    from django_workflows.testing import RecordingExecutor

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    settings.DJANGO_WORKFLOWS = {}
    assert replay_tasks.lane_count() == 4  # the default: a replay also waits for what its steps call
    settings.DJANGO_WORKFLOWS = {"REPLAY_THREADS": None}
    assert checks.check_settings() == []
    for executor, workers, lanes in [(DjangoQExecutor(), 2, 8), (DjangoQExecutor(), 8, 2),
                                     (DjangoQExecutor(), 32, 1), (RecordingExecutor(), 2, 2)]:
        monkeypatch.setattr(Conf, "WORKERS", workers)
        push_override(executor)
        try:
            assert replay_tasks.lane_count() == lanes
        finally:
            pop_override()
    settings.DJANGO_WORKFLOWS = {"REPLAY_THREADS": 3}
    assert replay_tasks.lane_count() == 3
