"""Waiting for instances on PostgreSQL: however many callers wait (result() in threads, aresult() in an
event loop, watches of the instance's stream), the process listens for their instances' news on one
connection, counted in pg_stat_activity, and each caller is woken by its own instance's end alone."""

import asyncio
import threading
import time
from contextlib import ExitStack

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections

from django_workflows import workflows
from django_workflows.shared.changes import INSTANCE_CHANNEL
from django_workflows.shared.instance_watch import InstanceWatch

pytestmark = pytest.mark.postgres

INLINE = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


def listening_connections() -> int:
    """The backends of this database whose last statement was the LISTEN on the instances' channel."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND query = %s", [f'LISTEN "{INSTANCE_CHANNEL}"'])
        return cursor.fetchone()[0]


def no_listening_connection_left() -> bool:
    """True once no backend listens: a closed connection's backend leaves pg_stat_activity as it exits,
    which the server does after the client has gone."""
    for _ in range(100):
        if listening_connections() == 0:
            return True
        time.sleep(0.05)
    return False


def approve(instance) -> None:
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})


def test_a_hundred_watches_listen_on_one_connection_and_each_hears_its_own_instance(transactional_db,
                                                                                    settings):
    settings.DJANGO_WORKFLOWS = INLINE
    instances = [workflows.get("approval").create() for _ in range(100)]
    with ExitStack() as stack:
        watches = [stack.enter_context(InstanceWatch(instance.pk, "default")) for instance in instances]
        assert all(watch.listening for watch in watches)
        assert listening_connections() == 1
        for instance in instances[:10]:
            approve(instance)  # each ends, and its end is notified
        assert [watch.wait(5) for watch in watches[:10]] == [True] * 10
        assert [watch.wait(0) for watch in watches[10:]] == [False] * 90
        assert [watch.wait(0) for watch in watches[:10]] == [False] * 10  # each notification woke one wait
    assert all(instance.status()["status"] == "complete" for instance in instances[:10])
    assert no_listening_connection_left()


def test_only_the_end_of_an_instance_something_waits_for_is_notified(transactional_db, settings):
    """Every notification costs its transaction PostgreSQL's lock on the notification queue through its
    commit: the end of an instance nothing waits for is not notified; a watch marks its instance first."""
    import psycopg

    from django_workflows.models import Instance
    from django_workflows.shared.instance_watch import _connection_params

    settings.DJANGO_WORKFLOWS = INLINE
    unwatched, watched = (workflows.get("approval").create() for _ in range(2))
    with psycopg.connect(**_connection_params("default"), autocommit=True) as listening:
        listening.execute(f'LISTEN "{INSTANCE_CHANNEL}"')
        approve(unwatched)
        with InstanceWatch(watched.pk, "default") as watch:
            assert watch.listening and Instance.objects.get(pk=watched.pk).watched
            approve(watched)
            assert watch.wait(5)
        heard = [notification.payload for notification in listening.notifies(timeout=1)]
    assert [unwatched.status()["status"], watched.status()["status"]] == ["complete", "complete"]
    assert heard == [str(watched.pk)]
    assert not Instance.objects.get(pk=unwatched.pk).watched


def test_a_watch_inside_the_callers_transaction_polls_without_marking(transactional_db, settings):
    """Marked inside the caller's transaction, the row would stay locked until the caller commits, and the
    replay ending the instance would wait for it: the watch polls instead."""
    from django.db import transaction

    from django_workflows.models import Instance

    settings.DJANGO_WORKFLOWS = INLINE
    instance = workflows.get("approval").create()
    with transaction.atomic(), InstanceWatch(instance.pk, "default") as watch:
        assert not watch.marked and not watch.listening
        started = time.monotonic()
        assert watch.wait(5) is False
        assert time.monotonic() - started < 1  # a poll's pause, not the wait asked for
    assert not Instance.objects.get(pk=instance.pk).watched


def test_a_watch_does_not_wait_for_a_row_an_atomic_step_holds(transactional_db, settings):
    """An atomic=True step holds its instance's row (the journal's fence, FOR SHARE) while its body runs:
    the watch does not wait for it to mark the instance, it polls; once the row is free, a watch marks it."""
    import psycopg

    from django_workflows.models import Instance
    from django_workflows.shared.instance_watch import _connection_params

    settings.DJANGO_WORKFLOWS = INLINE
    instance = workflows.get("approval").create()
    with psycopg.connect(**_connection_params("default")) as holder:
        holder.execute("SELECT 1 FROM django_workflows_instance WHERE id = %s FOR SHARE", [instance.pk])
        started = time.monotonic()
        with InstanceWatch(instance.pk, "default") as watch:
            assert not watch.marked and not watch.listening
        assert time.monotonic() - started < 2
        holder.rollback()
    assert not Instance.objects.get(pk=instance.pk).watched
    with InstanceWatch(instance.pk, "default") as watch:
        assert watch.marked and watch.listening
    with InstanceWatch(instance.pk, "default") as again:  # already marked: nothing written, still notified
        assert again.marked
    assert Instance.objects.get(pk=instance.pk).watched


def test_waiting_callers_in_threads_and_in_an_event_loop_share_one_listening_connection(transactional_db,
                                                                                           settings):
    settings.DJANGO_WORKFLOWS = INLINE
    in_threads = [workflows.get("approval").create() for _ in range(20)]
    in_the_loop = [workflows.get("approval").create() for _ in range(40)]
    outputs: dict[int, object] = {}

    def wait_in_a_thread(instance) -> None:
        try:
            outputs[instance.pk] = instance.result(timeout=60)
        except BaseException as exc:  # reported by the test
            outputs[instance.pk] = exc
        finally:
            connections.close_all()

    async def wait_in_the_loop() -> None:
        results = await asyncio.gather(*(instance.aresult(timeout=60) for instance in in_the_loop),
                                       return_exceptions=True)
        outputs.update(zip((instance.pk for instance in in_the_loop), results))
        await sync_to_async(connections.close_all)()  # the looks' connection, in Django's thread for them

    loop_thread = threading.Thread(target=lambda: (asyncio.run(wait_in_the_loop()), connections.close_all()))
    threads = [threading.Thread(target=wait_in_a_thread, args=(instance,)) for instance in in_threads]
    for thread in (*threads, loop_thread):
        thread.start()
    # While the sixty wait (each has looked once, and then looks every RECHECK_SECONDS): never more than one
    # connection listens for them.
    seen = []
    for _ in range(40):
        seen.append(listening_connections())
        time.sleep(0.05)
    for instance in (*in_threads, *in_the_loop):
        approve(instance)
    for thread in (*threads, loop_thread):
        thread.join(60)
    assert max(seen) == 1, seen
    assert {pk: output for pk, output in outputs.items() if output.get("status") != "approved"} == {}
    assert len(outputs) == 60
    assert no_listening_connection_left()  # the last wait to end closed it
