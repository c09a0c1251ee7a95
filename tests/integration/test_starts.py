"""Instances that start later: create(start_at=...), start_in=..., and debounce=... (the status scheduled),
with the test clock; and debounced triggers racing on two connections."""

import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, connections, transaction

from django_workflows import workflows
from django_workflows.errors import InvalidParams, InvalidTransition
from django_workflows.models import Instance
from django_workflows.store.dispatch import next_wake_time, wake_due


def rows() -> list[dict]:
    return list(Instance.objects.order_by("pk").values())


def started_at(handle):
    return Instance.objects.get(pk=handle.pk).started_at


# Delayed start.

def test_a_start_in_instance_is_scheduled_and_starts_at_its_time(workflows_env):
    created = workflows_env.now
    instance = workflows.get("three-steps").create(params={"n": 1}, start_in="10 minutes")
    assert instance.status() == {"status": "scheduled", "output": None, "error": None}
    row = Instance.objects.get(pk=instance.pk)
    assert row.wake_at == created + timedelta(minutes=10) and row.started_at is None
    assert workflows_env.executor.enqueued == []  # nothing to replay before its time
    assert next_wake_time() == created + timedelta(minutes=10)
    workflows_env.advance(timedelta(minutes=10) - timedelta(milliseconds=1))
    assert instance.status()["status"] == "scheduled"
    workflows_env.advance("1 millisecond")
    assert instance.status()["output"]["params"] == {"n": 1}
    assert started_at(instance) == created + timedelta(minutes=10)


def test_a_start_at_instance_starts_at_that_moment_in_any_time_zone(workflows_env):
    moment = (workflows_env.now + timedelta(hours=3)).astimezone(ZoneInfo("Asia/Tokyo"))
    instance = workflows.get("three-steps").create(start_at=moment)
    assert instance.status()["status"] == "scheduled"
    workflows_env.advance("3 hours")
    assert instance.status()["status"] == "complete"
    assert started_at(instance) == moment


@pytest.mark.parametrize("start", [{"start_in": 0}, {"start_in": "0 seconds"}, {"start_at": "past"}])
def test_a_start_that_has_come_starts_at_once(workflows_env, start):
    if start.get("start_at") == "past":
        start = {"start_at": workflows_env.now - timedelta(days=1)}
    instance = workflows.get("three-steps").create(**start)
    assert instance.status()["status"] == "queued"
    assert workflows_env.executor.enqueued == [instance.pk]


@pytest.mark.parametrize("start, message", [
    ({"start_at": datetime(2030, 1, 1)}, "has no time zone"),
    ({"start_at": "2030-01-01T00:00:00Z"}, "start_at must be a datetime"),
    ({"start_in": "soon"}, "start_in: cannot parse 'soon'"),
    ({"start_in": -5}, "negative"),
    ({"start_in": "20 years"}, "more than 3650 days"),
    ({"start_in": "1 minute", "start_at": datetime(2030, 1, 1, tzinfo=UTC)}, "one of start_at, start_in and debounce"),
    ({"start_in": "1 minute", "debounce": {"key": "k", "period": "1 minute"}}, "one of start_at, start_in"),
])
def test_a_start_it_cannot_take_is_refused_and_creates_nothing(workflows_env, start, message):
    with pytest.raises(InvalidParams, match=message):
        workflows.get("three-steps").create(**start)
    assert rows() == []


def test_terminate_cancels_a_scheduled_instance_and_it_never_runs(workflows_env):
    instance = workflows.get("three-steps").create(start_in="1 hour")
    instance.terminate()
    workflows_env.advance("2 hours")
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.wake_at, row.started_at) == ("terminated", None, None)
    assert workflows_env.executor.enqueued == []


def test_pause_does_not_apply_to_a_scheduled_instance_and_restart_starts_it_now(workflows_env):
    instance = workflows.get("three-steps").create(start_in="1 hour")
    with pytest.raises(InvalidTransition, match="it is scheduled; pause applies to an instance that is queued"):
        instance.pause()
    assert instance.status()["status"] == "scheduled"
    instance.restart()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    assert started_at(instance) == workflows_env.now


def test_an_event_sent_to_a_scheduled_instance_waits_in_its_inbox_for_the_start(workflows_env):
    instance = workflows.get("approval").create(start_in="5 minutes")
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    assert instance.status()["status"] == "scheduled"
    workflows_env.advance("5 minutes")
    assert instance.status()["output"]["status"] == "approved"


# Debounce.

def debounced(params=None, key="user-7", period="5 seconds", **more):
    return workflows.get("three-steps").create(params=params, debounce={"key": key, "period": period, **more})


def test_20_triggers_in_a_second_make_one_instance_that_starts_a_period_after_the_last(workflows_env):
    handles = []
    for n in range(20):
        handles.append(debounced({"n": n}))
        workflows_env.advance("50 milliseconds")
    last_trigger = workflows_env.now - timedelta(milliseconds=50)
    assert len(set(handles)) == 1 and Instance.objects.count() == 1
    assert [handle.joined for handle in handles] == [False] + [True] * 19
    assert handles[0].status()["status"] == "scheduled"
    assert workflows_env.executor.enqueued == []
    row = Instance.objects.get()
    assert (row.params, row.wake_at, row.debounce_key) == ({"n": 19}, last_trigger + timedelta(seconds=5), "user-7")
    workflows_env.advance("4 seconds")
    assert handles[0].status()["status"] == "scheduled"
    workflows_env.advance("1 second")
    assert handles[0].status()["output"]["params"] == {"n": 19}
    assert Instance.objects.count() == 1


def test_a_trigger_after_the_start_makes_a_new_instance(workflows_env):
    first = debounced({"n": 1})
    workflows_env.advance("5 seconds")
    assert first.status()["status"] == "complete"
    second = debounced({"n": 2})
    assert second != first and not second.joined
    assert second.status()["status"] == "scheduled"


def test_keys_are_per_workflow(workflows_env):
    a, b = debounced(key="a"), debounced(key="b")
    other = workflows.get("sleeper").create(debounce={"key": "a", "period": "5 seconds"})
    assert len({a, b, other}) == 3 and not any(h.joined for h in (a, b, other))


def test_max_wait_starts_it_however_often_triggers_come(workflows_env):
    first = workflows_env.now
    for n in range(10):
        debounced({"n": n}, period="30 seconds", max_wait="1 minute")
        workflows_env.advance("20 seconds")
        if Instance.objects.get().status != "scheduled":
            break
    row = Instance.objects.get()
    assert row.started_at == first + timedelta(minutes=1)
    assert row.params == {"n": 2}  # the triggers at 0, 20 and 40 s; the one at 60 s came as it started


def test_a_merge_function_builds_the_params_from_every_trigger(workflows_env):
    def merge(so_far, new):
        return {"ids": so_far["ids"] + new["ids"]}

    for n in range(3):
        debounced({"ids": [n]}, merge=merge)
    workflows_env.advance("5 seconds")
    assert Instance.objects.get().params == {"ids": [0, 1, 2]}


def test_a_merge_that_raises_changes_nothing(workflows_env):
    debounced({"n": 1})
    before = rows()

    def broken(so_far, new):
        raise KeyError("nope")

    with pytest.raises(KeyError):
        debounced({"n": 2}, merge=broken)
    assert rows() == before


def test_an_overdue_instance_is_started_by_the_next_trigger_which_makes_a_new_one(workflows_env):
    first = debounced({"n": 1})
    workflows_env.clock.advance(timedelta(seconds=6))  # no wake-up loop ran meanwhile
    second = debounced({"n": 2})
    assert second != first and not second.joined
    assert Instance.objects.get(pk=first.pk).status == "queued"
    assert workflows_env.executor.enqueued == [first.pk]
    workflows_env.advance("5 seconds")
    assert first.status()["output"]["params"] == {"n": 1}
    assert second.status()["output"]["params"] == {"n": 2}


def test_after_a_terminate_the_next_trigger_makes_a_new_instance(workflows_env):
    first = debounced()
    first.terminate()
    assert debounced() != first


@pytest.mark.parametrize("debounce, message", [
    ("user-7", "debounce must be a dict"),
    ({"key": "k"}, "debounce must be a dict"),
    ({"key": "k", "period": "5 seconds", "delay": 1}, "debounce must be a dict"),
    ({"key": "", "period": "5 seconds"}, r"debounce\['key'\] must be a string of 1 to 255"),
    ({"key": 7, "period": "5 seconds"}, r"debounce\['key'\] must be a string"),
    ({"key": "k" * 256, "period": "5 seconds"}, r"debounce\['key'\] must be a string"),
    ({"key": "k", "period": 0}, "too short"),
    ({"key": "k", "period": "a while"}, "cannot parse"),
    ({"key": "k", "period": "1 minute", "max_wait": "30 seconds"}, r"debounce\['max_wait'\]: '30 seconds' is too short"),
    ({"key": "k", "period": "1 minute", "merge": "params.ids"}, r"debounce\['merge'\] must be a function"),
])
def test_a_debounce_it_cannot_take_is_refused_and_creates_nothing(workflows_env, debounce, message):
    with pytest.raises(InvalidParams, match=message):
        workflows.get("three-steps").create(debounce=debounce)
    assert rows() == []


def test_a_debounce_takes_no_id(workflows_env):
    with pytest.raises(InvalidParams, match="takes no id"):
        workflows.get("three-steps").create(id="mine", debounce={"key": "k", "period": "5 seconds"})
    assert rows() == []


# Racing triggers, each on a connection of its own.

def in_thread(target, results, index):
    def run():
        try:
            results[index] = target()
        except BaseException as exc:  # reported by the test
            results[index] = exc
        finally:
            connections.close_all()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_trigger_racing_a_first_one_not_yet_committed_joins_its_instance(workflows_env):
    """The first trigger's transaction holds its new instance uncommitted while the second looks: on
    PostgreSQL the second's insert waits for the first's commit, fails on the debounce index, and it looks
    again; on SQLite it waits for the write lock, then finds the instance."""
    inserted, release = threading.Event(), threading.Event()

    def first():
        with transaction.atomic():
            handle = debounced({"n": 1})
            inserted.set()
            release.wait(10)
        return handle

    results: list = [None, None]
    threads = [in_thread(first, results, 0)]
    assert inserted.wait(10)
    threads.append(in_thread(lambda: debounced({"n": 2}), results, 1))
    time.sleep(0.5)  # the second trigger is now waiting on the first's
    assert results[1] is None
    release.set()
    for thread in threads:
        thread.join(20)
    assert not any(isinstance(result, BaseException) for result in results), results
    assert results[0] == results[1] and [r.joined for r in results] == [False, True]
    assert list(Instance.objects.values_list("params", "status")) == [({"n": 2}, "scheduled")]


@pytest.mark.django_db(transaction=True)
def test_a_trigger_that_waited_for_the_row_past_the_start_makes_a_new_instance(workflows_env):
    """Once its start time has passed, the instance is starting: a trigger asked for before the start,
    which waited for the instance's row (another trigger held it) until after it, makes a new instance and
    queues the one due, as a trigger asked for after the start does, whether or not the wake-up loop has
    queued it meanwhile; it does not join the instance and put its start off."""
    first = debounced({"n": 1})
    held, release = threading.Event(), threading.Event()

    def joining():
        with transaction.atomic():
            handle = debounced({"n": 2})  # joins, and holds the row until released
            held.set()
            release.wait(10)
        return handle

    results: list = [None, None]
    threads = [in_thread(joining, results, 0)]
    assert held.wait(10)
    threads.append(in_thread(lambda: debounced({"n": 3}), results, 1))  # asked for now, before the start
    time.sleep(0.5)  # the third trigger is now waiting for the row
    assert results[1] is None
    workflows_env.clock.advance(timedelta(seconds=6))  # past the start the second trigger gave it
    release.set()
    for thread in threads:
        thread.join(20)
    assert not any(isinstance(result, BaseException) for result in results), results
    assert results[0] == first and results[0].joined
    assert results[1] != first and not results[1].joined
    assert list(Instance.objects.order_by("pk").values_list("params", "status")) == [
        ({"n": 2}, "queued"), ({"n": 3}, "scheduled")]
    assert workflows_env.executor.enqueued == [first.pk]


@pytest.mark.django_db(transaction=True)
def test_20_triggers_from_4_connections_at_once_make_one_instance(workflows_env):
    barrier = threading.Barrier(4)

    def trigger_five(worker):
        barrier.wait()
        return [debounced({"worker": worker, "n": n}) for n in range(5)]

    results: list = [None] * 4
    for thread in [in_thread(lambda worker=worker: trigger_five(worker), results, worker) for worker in range(4)]:
        thread.join(60)
    assert not any(isinstance(result, BaseException) for result in results), results
    handles = [handle for batch in results for handle in batch]
    assert len(handles) == 20 and len(set(handles)) == 1
    assert sum(not handle.joined for handle in handles) == 1
    assert Instance.objects.count() == 1
    workflows_env.advance("5 seconds")
    assert Instance.objects.get().status == "complete"


def test_the_wake_up_loop_claims_due_waiting_and_scheduled_instances_in_one_statement(workflows_env):
    from django.test.utils import CaptureQueriesContext

    sleeper = workflows.get("sleeper").create(params={"duration": "1 minute"})
    workflows_env.run_until_idle()
    scheduled = workflows.get("three-steps").create(start_in="1 minute")
    later = workflows.get("three-steps").create(start_in="1 hour")
    workflows_env.clock.advance(timedelta(minutes=1))
    with CaptureQueriesContext(connection) as ctx:
        assert wake_due() == 2
    assert len([q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]) == 1
    assert sorted(workflows_env.executor.queue) == sorted([sleeper.pk, scheduled.pk])
    assert later.status()["status"] == "scheduled"
