"""The wake-up claim, the sweeper, the django-q2 executor's checks and the qcluster fallback, in-process."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.executors.q2 import DjangoQExecutor
from django_workflows.models import Instance
from django_workflows.client.new_instances import new_instance
from django_workflows.store.dispatch import next_wake_time, sweep, wake_due
from tests.index_catalog import index_definition, query_plan
from tests.testapp.workflows import calls


def test_wake_due_claims_only_due_instances_in_one_query(workflows_env):
    due = workflows.get("sleeper").create(params={"duration": "1 minute"})
    later = workflows.get("sleeper").create(params={"duration": "1 hour"})
    workflows_env.run_until_idle()
    workflows_env.executor.reset()
    assert next_wake_time() == workflows_env.now + timedelta(minutes=1)
    workflows_env.clock.advance(timedelta(minutes=2))
    with CaptureQueriesContext(connection) as ctx:
        assert wake_due() == 1
    claims = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(claims) == 1
    if connection.vendor == "postgresql":
        assert "FOR UPDATE SKIP LOCKED" in claims[0]
    assert list(workflows_env.executor.queue) == [due.pk]
    assert Instance.objects.get(pk=due.pk).status == "queued"
    assert Instance.objects.get(pk=later.pk).status == "waiting"
    assert wake_due() == 0  # claimed once only
    workflows_env.run_until_idle()
    assert due.status()["output"] == "after"


def test_wake_due_works_through_batches(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WAKE_BATCH": 2}
    for _ in range(5):
        workflows.get("sleeper").create(params={"duration": 1000})
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(seconds=2))
    assert wake_due() == 5


def test_sweep_requeues_expired_leases_counting_the_crash(workflows_env):
    instance = workflows.get("three-steps").create()
    paused = workflows.get("three-steps").create()
    workflows_env.executor.reset()
    past = workflows_env.now - timedelta(seconds=1)
    Instance.objects.filter(pk=instance.pk).update(status="running", lease_expires_at=past)
    Instance.objects.filter(pk=paused.pk).update(status="waitingForPause", lease_expires_at=past)
    assert sweep() == 1
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.crash_count, row.lease_expires_at) == ("queued", 1, None)
    assert Instance.objects.get(pk=paused.pk).status == "paused"
    assert list(workflows_env.executor.queue) == [instance.pk]
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    assert Instance.objects.get(pk=instance.pk).crash_count == 0


# What run() of "frozen-before-its-end" does between its step and its end: the test's freeze.
freezes: list = []


@pytest.fixture
def frozen_replay():
    freezes.clear()
    yield freezes
    freezes.clear()


class FrozenBeforeItsEnd(WorkflowEntrypoint):
    name = "frozen-before-its-end"

    def run(self, event, step):
        done = step.do("a", lambda: calls.update(["a"]) or "done")
        for freeze in freezes:
            freeze()
        return done


@pytest.mark.parametrize("pause", [True, False])
def test_a_replay_frozen_past_its_lease_cannot_undo_what_the_sweeper_did(workflows_env, frozen_replay, pause):
    from django_workflows.foundations.conf import workflow_settings
    from django_workflows.store.lease_keeper import keeper

    instance = workflows.get("frozen-before-its-end").create()

    def frozen():
        # The process stops after its last step, before it gives its lease back: it renews nothing, its own
        # count of the lease runs out, and meanwhile a pause is asked and the sweeper finds the lease expired.
        if pause:
            instance.pause()
        workflows_env.clock.advance(timedelta(seconds=workflow_settings.LEASE_SECONDS + 1))
        for lease in keeper._held.values():
            lease.deadline = 0.0
        assert sweep(workflows_env.now) == (0 if pause else 1)

    frozen_replay.append(frozen)
    workflows_env.executor.reset()
    outcomes = []
    from django_workflows.signals import replay_finished

    def finished(outcome, **kwargs):
        outcomes.append(outcome)

    replay_finished.connect(finished)
    try:
        from django_workflows.engine.replay import replay

        replay(instance.pk)
    finally:
        replay_finished.disconnect(finished)
    # The frozen replay resumes and ends run(): its end is refused, and the instance stays as the sweeper
    # left it, paused as asked, or queued for the replay the sweeper enqueued.
    assert outcomes == ["fenced"]
    assert Instance.objects.get(pk=instance.pk).status == ("paused" if pause else "queued")
    frozen_replay.clear()
    if pause:
        instance.resume()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"
    assert calls["a"] == 1


def _died_holding_the_lease(workflows_env, *, crash_count: int, finished_a_step: bool) -> Instance:
    """An instance whose replay took the lease at T0, journaled a step (or not) and died."""
    from django_workflows.models import Step

    instance = workflows.get("three-steps").create()
    workflows_env.executor.reset()
    taken_at = workflows_env.now - timedelta(minutes=5)
    Instance.objects.filter(pk=instance.pk).update(
        status="running", crash_count=crash_count, updated_at=taken_at, epoch=1,
        lease_expires_at=workflows_env.now - timedelta(seconds=1))
    Step.objects.create(instance_id=instance.pk, key="a-1", name="a", kind="do", result=1,
                        status="succeeded" if finished_a_step else "retrying", started_at=taken_at,
                        ended_at=taken_at + timedelta(minutes=1) if finished_a_step else None)
    return instance


@pytest.mark.parametrize("finished_a_step, counted", [(True, 0), (False, 3)])
def test_the_sweeper_counts_toward_poison_only_replays_that_died_without_progress(
        workflows_env, finished_a_step, counted):
    instance = _died_holding_the_lease(workflows_env, crash_count=2, finished_a_step=finished_a_step)
    assert sweep() == 1
    assert Instance.objects.get(pk=instance.pk).crash_count == counted


@pytest.mark.parametrize("finished_a_step, counted", [(True, 0), (False, 3)])
def test_taking_over_an_expired_lease_counts_only_replays_that_died_without_progress(
        workflows_env, finished_a_step, counted):
    from django_workflows.store import leases

    instance = _died_holding_the_lease(workflows_env, crash_count=2, finished_a_step=finished_a_step)
    taken = leases.take(instance.pk, "another-worker", workflows_env.now, 60)
    assert taken.crash_count == counted == Instance.objects.get(pk=instance.pk).crash_count


def test_a_replay_that_progressed_before_dying_is_not_parked(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"POISON_LIMIT": 3}
    instance = _died_holding_the_lease(workflows_env, crash_count=2, finished_a_step=True)
    sweep()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    assert calls == {"b": 1, "c": 1}  # the journaled step was not run again


def test_sweep_redispatches_instances_queued_too_long(workflows_env):
    instance = workflows.get("three-steps").create()
    workflows_env.executor.reset()  # the task is "lost"
    assert sweep() == 0
    workflows_env.clock.advance(timedelta(seconds=61))
    assert sweep() == 1
    assert list(workflows_env.executor.queue) == [instance.pk]
    assert sweep() == 0  # touched: not again until another REDISPATCH_SECONDS pass


def test_poison_limit_parks_the_instance(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"POISON_LIMIT": 2}
    instance = workflows.get("three-steps").create()
    Instance.objects.filter(pk=instance.pk).update(crash_count=2)
    workflows_env.run_until_idle()
    assert instance.status()["error"]["name"] == "PoisonInstance"
    assert calls == {}


def test_an_event_queues_the_waiting_instance_so_a_lost_task_is_recovered(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    assert Instance.objects.get(pk=instance.pk).status == "queued"


def test_the_fallback_schedule_exists_after_migrate(db):
    from django_q.models import Schedule

    schedule = Schedule.objects.get(name="django_workflows.tick")
    assert schedule.func == "django_workflows.tick" and schedule.schedule_type == Schedule.MINUTES


def test_the_orm_broker_on_the_same_database_enqueues_inside_the_transaction(db):
    from django_q.models import OrmQ

    executor = DjangoQExecutor()
    assert executor.enqueues_in_transaction
    executor.enqueue_replay(123)
    assert OrmQ.objects.count() == 1


def test_q_cluster_recommended_settings_pass():
    assert list(DjangoQExecutor().check()) == []


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"orm": None}, "django_workflows.W101"),
        ({"timeout": 960}, "django_workflows.E102"),
        ({"timeout": 300, "retry": 400}, "django_workflows.W103"),
        ({"queue_limit": None}, "django_workflows.W105"),
        ({"ack_failures": False}, "django_workflows.W106"),
        ({"save_limit": 0}, "django_workflows.W107"),
        ({"broker_class": None}, "django_workflows.W108"),
    ],
)
def test_q_cluster_checks(settings, change, expected):
    settings.Q_CLUSTER = {k: v for k, v in {**settings.Q_CLUSTER, **change}.items() if v is not None or k == "queue_limit"}
    assert [m.id for m in DjangoQExecutor().check()] == [expected]


def test_a_broker_named_by_the_path_of_a_module_that_moved_is_the_recommended_one(settings, monkeypatch):
    # A project's settings keep the broker's dotted path from before the module moved: still no W108.
    import sys

    from django_workflows import moved_modules
    from django_workflows.executors.q2_conf import ORM_BROKER

    module, _, name = ORM_BROKER.rpartition(".")
    monkeypatch.setitem(moved_modules.MOVED_MODULES, "django_workflows.earlier_broker", module)
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "broker_class": f"django_workflows.earlier_broker.{name}"}
    with pytest.warns(DeprecationWarning, match="earlier_broker moved"):
        messages = list(DjangoQExecutor().check())
    sys.modules.pop("django_workflows.earlier_broker", None)
    assert messages == []


def test_lease_longer_than_retry(settings):
    settings.DJANGO_WORKFLOWS = {"LEASE_SECONDS": 1000}
    (message,) = DjangoQExecutor().check()
    assert message.id == "django_workflows.W104"
    # The fix is a longer retry (a lease of 30 to 60 s is already the default).
    assert message.hint.startswith("Raise Q_CLUSTER retry above both LEASE_SECONDS and timeout")


def test_django_q2_defaults_warn_with_hints_that_point_the_right_way(settings):
    settings.Q_CLUSTER = {"name": "site", "orm": "default", "broker_class": "django_workflows.executors.broker.ORMBroker"}
    messages = {m.id: m for m in DjangoQExecutor().check()}
    assert set(messages) == {"django_workflows.W104", "django_workflows.W106"}
    assert "retry above both LEASE_SECONDS" in messages["django_workflows.W104"].hint
    assert messages["django_workflows.W106"].msg.startswith(
        "Q_CLUSTER ack_failures is not True: a task that fails stays in the queue and is delivered again")


@pytest.mark.django_db(transaction=True)
def test_a_broker_whose_package_is_missing_refuses_to_create_anything(settings, monkeypatch):
    import sys

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from django_workflows.errors import WorkflowConfigError

    monkeypatch.setitem(sys.modules, "redis", None)  # as if the redis package were not installed
    monkeypatch.delitem(sys.modules, "django_q.brokers.redis_broker", raising=False)
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "orm": None, "broker_class": None, "redis": {"host": "127.0.0.1"}}
    with pytest.raises(WorkflowConfigError, match="^Q_CLUSTER's broker needs the 'redis' package, which is not "
                                                  "installed: pip install redis"):
        workflows.get("three-steps").create(id="never", params={})
    with pytest.raises(CommandError, match="needs the 'redis' package"):
        call_command("workflows", "trigger", "three-steps", "{}", "--id", "never")
    assert not Instance.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_lease_keeper_renews_a_held_lease(settings):
    import time

    from django_workflows.shared import clock
    from django_workflows.store.lease_keeper import keeper

    settings.DJANGO_WORKFLOWS = {"LEASE_SECONDS": 1}
    handle = workflows.get("three-steps")
    instance = new_instance(handle.workflow_class, handle.name, "leased", {})
    instance.status, instance.epoch = "running", 7
    instance.lease_expires_at = clock.now() + timedelta(seconds=1)
    instance.save()
    first = instance.lease_expires_at
    with keeper.hold(instance.pk, 7):
        time.sleep(2.5)
    # A renewal already under way when the block ended may still land (on a loaded machine, well after
    # it): the value is read once it has stopped moving.
    renewed = Instance.objects.get(pk=instance.pk).lease_expires_at
    for _ in range(20):
        time.sleep(0.3)
        again = Instance.objects.get(pk=instance.pk).lease_expires_at
        if again == renewed:
            break
        renewed = again
    assert renewed > first + timedelta(seconds=1)
    with keeper.hold(instance.pk, 8):  # another epoch: not ours to renew
        time.sleep(1.5)
    assert Instance.objects.get(pk=instance.pk).lease_expires_at == renewed


@pytest.mark.django_db(transaction=False)
def test_the_wake_up_queries_walk_the_wake_index_without_sorting(workflows_env):
    # Without statistics (a database never ANALYZEd, as migrate leaves it) SQLite used to pick the
    # (status, updated_at) index and sort every waiting instance, once a second.
    query = Instance.objects.filter(status="waiting", wake_at__isnull=False).order_by("wake_at").values("wake_at")[:1]
    plan = query_plan(query)
    assert "dw_instance_wake" in plan and "TEMP B-TREE" not in plan and "Sort" not in plan, plan


@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize("due", ["own-retention", "setting"])
def test_the_retention_reads_find_their_batch_through_the_retention_index(workflows_env, due):
    from django_workflows.store.retention import due_by_own_retention, due_by_setting

    # The purge reads a batch of due instances for every batch: without an index that holds the
    # purge time and the end time it would read every finished instance (or every instance) each time,
    # and the read by the setting would walk again and again past the instances kept longer by their own.
    now = workflows_env.now
    rows = due_by_own_retention(now) if due == "own-retention" else due_by_setting(now)
    query = rows.order_by().values_list("pk", flat=True)[:500]
    plan = query_plan(query)
    assert "dw_instance_purge" in plan, plan
    if connection.vendor == "postgresql":
        condition = plan.split("Index Cond")[1]
        expected = ["purge_at <"] if due == "own-retention" else ["purge_at IS NULL", "ended_at <"]
        assert all(part in condition for part in expected), plan
    else:
        expected = "purge_at<?" if due == "own-retention" else "purge_at=? AND ended_at<?"
        assert expected in plan, plan


@pytest.mark.django_db(transaction=False)
def test_the_retention_index_holds_only_the_instances_that_ended(workflows_env):
    # Retention reads only ended instances: an index over every instance was written by each INSERT and
    # each change of status of a running one for nothing.
    definition = index_definition("dw_instance_purge")
    assert "(status, purge_at, ended_at)" in definition.replace('"', "")
    assert "WHERE" in definition and "ended_at IS NOT NULL" in definition.replace('"', ""), definition


def _finished_long_ago(workflows_env, count: int) -> list:
    """``count`` instances with a journal and an inbox (an approval consumed its event), finished 31 days
    ago."""
    instances = []
    for index in range(count):
        if index % 2:
            instance = workflows.get("three-steps").create()
        else:
            instance = workflows.get("approval").create()
            workflows_env.run_until_idle()
            instance.send_event(type="manager-approval", payload={"outcome": "approved"})
        instances.append(instance)
    workflows_env.run_until_idle()
    assert {i.status()["status"] for i in instances} == {"complete"}
    workflows_env.advance("31 days")
    return instances


def test_retention_deletes_in_batches_with_a_bounded_number_of_statements_and_reads_no_step(workflows_env,
                                                                                           settings):
    from django_workflows.models import Event, Step
    from django_workflows.store.retention import purge_finished

    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 2}
    old = _finished_long_ago(workflows_env, 5)
    pks = [i.pk for i in old]
    assert Step.objects.filter(instance_id__in=pks).count() == 3 * 2 + 2 * 3
    assert Event.objects.filter(instance_id__in=pks, consumed_by__isnull=False).count() == 3
    with CaptureQueriesContext(connection) as ctx:
        assert purge_finished() == 5
    statements = [q["sql"] for q in ctx.captured_queries
                  if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN"))]
    step_table = connection.ops.quote_name(Step._meta.db_table)
    # Django's cascade reads every step row of a batch (to null the events that consumed them): no
    # statement may read the journal into Python.
    assert not [sql for sql in statements if sql.startswith("SELECT") and f"FROM {step_table}" in sql]
    # One read for instances whose own retention ran out (none here), then three batches (2, 2, 1) by
    # the setting: each is read once (and, on PostgreSQL, its instances locked once), then five
    # DELETEs (the inbox, its deliveries, the tags, the journal, the instances), each re-checking the
    # instances' status and end time itself.
    deletes = [sql for sql in statements if sql.startswith("DELETE")]
    selects = [sql for sql in statements if sql.startswith("SELECT")]
    assert len(deletes) == 3 * 5
    assert len(selects) == 1 + 3 * (2 if connection.vendor == "postgresql" else 1)
    assert len(statements) == len(deletes) + len(selects)
    assert all('"status" IN' in sql and '"ended_at" <' in sql for sql in deletes), deletes
    assert not Instance.objects.filter(pk__in=pks).exists()
    assert not Step.objects.filter(instance_id__in=pks).exists()
    assert not Event.objects.filter(instance_id__in=pks).exists()


@pytest.mark.parametrize("again", ["finishes-again", "waits"])
def test_a_purge_racing_a_restart_keeps_the_restarted_journal_and_inbox(workflows_env, settings, again):
    from django_workflows.models import Event, Step
    from django_workflows.store.retention import purge_finished

    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 10}
    approval, three_steps = _finished_long_ago(workflows_env, 2)
    # Run again, three steps finish at once (the status is finished again, the end time is new); an
    # approval waits (the status is live).
    restarted, gone = (three_steps, approval) if again == "finishes-again" else (approval, three_steps)
    fresh = {}

    def journal_and_inbox():
        return (sorted(Step.objects.filter(instance_id=restarted.pk).values_list("pk", flat=True)),
                sorted(Event.objects.filter(instance_id=restarted.pk).values_list("pk", flat=True)))

    def restart_after_the_batch_is_chosen(execute, sql, params, many, context):
        # The statement after the one that chose the batch: the purge has read the ids (the restarted
        # instance among them, finished 31 days ago) and not yet deleted anything.
        if fresh.get("chosen") and not fresh.get("done"):
            fresh["done"] = True
            restarted.restart()
            workflows_env.run_until_idle()  # the new run writes its journal
            if again == "waits":
                restarted.send_event(type="unrelated", payload={"kept": True})  # and gets an inbox
            fresh["steps"], fresh["events"] = journal_and_inbox()
        if sql.startswith("SELECT") and '"ended_at" <' in sql and "LIMIT" in sql and "FOR UPDATE" not in sql:
            fresh["chosen"] = True
        return execute(sql, params, many, context)

    with connection.execute_wrapper(restart_after_the_batch_is_chosen):
        purged = purge_finished()
    assert fresh.get("done")
    assert restarted.status()["status"] == ("complete" if again == "finishes-again" else "waiting")
    # The new run's journal (and inbox) are whole; only the instance that stayed finished is gone.
    assert fresh["steps"] and journal_and_inbox() == (fresh["steps"], fresh["events"])
    assert len(fresh["events"]) == (1 if again == "waits" else 0)
    assert not Instance.objects.filter(pk=gone.pk).exists()
    assert not Step.objects.filter(instance_id=gone.pk).exists()
    assert purged == 1


def test_a_purge_stops_between_batches_once_told_to(workflows_env, settings):
    import threading

    from django_workflows.store.retention import purge_finished

    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 2}
    old = [i.pk for i in _finished_long_ago(workflows_env, 5)]
    stop = threading.Event()
    instance_table = connection.ops.quote_name(Instance._meta.db_table)

    def stop_after_the_first_batch(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith(f"DELETE FROM {instance_table}"):
            stop.set()  # as a worker's shutdown would, while the first batch is being deleted
        return result

    with connection.execute_wrapper(stop_after_the_first_batch):
        # The pause is spent waiting on ``stop``, so a stop cuts it short.
        assert purge_finished(pause=30, stop=stop) == 2
    assert Instance.objects.filter(pk__in=old).count() == 3
