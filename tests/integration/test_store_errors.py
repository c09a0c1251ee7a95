"""A database error in the engine's own statements is the infrastructure's, not the instance's.

It never reaches run() as an exception a saga could catch, it is never the instance's error and never
counted toward poison: the replay is abandoned, the lease given back, and the instance replayed a
moment later from its journal.
"""

import sqlite3
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import OperationalError, connection

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.models import Instance
from django_workflows.testing import run_workflows
from tests.own_connections import dsn

seen = {"charge": 0, "compensate": 0, "caught": []}



def _kill_this_connection() -> None:
    """From another connection, as an operator or a failover would: pg_terminate_backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(**dsn(), autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])


class ChargeThenCompensate(WorkflowEntrypoint):
    """A saga's first step: compensate when the charge fails."""

    name = "store-errors-saga"

    def run(self, event, step):
        def charge():
            seen["charge"] += 1
            if seen["charge"] == 1:
                _kill_this_connection()  # the charge succeeded; its journal row cannot be written
            return {"charged": 120}

        try:
            charged = step.do("charge", charge)
        except Exception as exc:  # a saga's compensation: must never see the engine's own failure
            seen["caught"].append(repr(exc))
            seen["compensate"] += 1
            return {"status": "refunded"}
        return {"status": "paid", **charged}


@pytest.fixture
def saga():
    seen.update(charge=0, compensate=0, caught=[])
    yield
    seen.update(charge=0, compensate=0, caught=[])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_killed_after_a_step_returns_is_never_seen_by_run(saga):
    with run_workflows() as env:
        instance = workflows.get("store-errors-saga").create(id="order-1", params={})
        env.run_until_idle()
        row = Instance.objects.get(pk=instance.pk)
        # Abandoned, not errored: the lease is back, and a timer replays it shortly.
        assert (row.status, row.error, row.crash_count, row.lease_owner) == ("waiting", None, 0, "")
        assert row.wake_at == env.now + timedelta(seconds=2)
        env.advance("2 seconds")
        assert instance.status() == {"status": "complete", "output": {"status": "paid", "charged": 120},
                                     "error": None}
    assert seen["caught"] == [] and seen["compensate"] == 0
    assert seen["charge"] == 2  # at least once: the body ran again, as docs/concepts/guarantees.md says a step may


class HoldsALockPastTheEnginesPatience(WorkflowEntrypoint):
    """Its step returns while another connection holds a lock the journal write needs, for longer than
    the replay's connection waits (SQLite's busy timeout, PostgreSQL's lock_timeout)."""

    name = "store-errors-locked"

    def run(self, event, step):
        def work():
            seen["charge"] += 1
            if seen["charge"] == 1:
                holder = _lock_from_another_connection(event.instance_id)
                threading.Timer(1.0, holder.close).start()
            return "done"

        try:
            return step.do("work", work)
        except Exception as exc:
            seen["caught"].append(repr(exc))
            return "caught"


def _lock_from_another_connection(instance_id: str):
    table = Instance._meta.db_table
    if connection.vendor == "sqlite":
        holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")  # SQLite's one write lock
        return holder
    holder = psycopg.connect(**dsn())
    holder.execute(f"SELECT 1 FROM {table} WHERE instance_id = %s FOR UPDATE", [instance_id])
    return holder


@pytest.mark.django_db(transaction=True)
def test_a_lock_timeout_on_a_journal_write_abandons_the_replay_and_it_completes_later(saga):
    with connection.cursor() as cursor:
        # Give up on a lock quickly, as a busy database under load does after its own timeout.
        cursor.execute("PRAGMA busy_timeout = 50" if connection.vendor == "sqlite" else "SET lock_timeout = '50ms'")
    with run_workflows() as env:
        instance = workflows.get("store-errors-locked").create(id="locked", params={})
        env.run_until_idle()
        row = Instance.objects.get(pk=instance.pk)
        assert (row.status, row.error, row.crash_count) == ("waiting", None, 0)
        env.advance("2 seconds")
        assert instance.status()["status"] == "complete"
        assert instance.status()["output"] == "done"
    assert seen["caught"] == []
    assert seen["charge"] == 2


class CallsAfterItsLastStep(WorkflowEntrypoint):
    """Its last step's row is written before run() goes on (str() is a call): the release is alone."""

    name = "store-errors-release-alone"

    def run(self, event, step):
        return str(step.do("a", lambda: 1))


class ReturnsItsLastStep(WorkflowEntrypoint):
    """Its last step's row goes with the release: one statement on PostgreSQL."""

    name = "store-errors-release-with-row"

    def run(self, event, step):
        return step.do("a", lambda: 1)


def _losing_the_release_reply(lost: list):
    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not lost and "lease_owner = ''" in sql and "ended_at" in sql:
            lost.append(sql)
            raise OperationalError("server closed the connection unexpectedly")
        return result
    return wrapper


@pytest.mark.postgres  # SQLite runs in the process: no reply to lose, and an unread statement rolls back
@pytest.mark.django_db(transaction=True)
def test_a_release_that_landed_but_whose_reply_was_lost_leaves_the_instance_ended():
    # The release committed and the connection dropped before its reply: the replay takes it for a failed
    # statement and gives its lease back, which must not reopen the instance it ended. Alone, and with its
    # last step's row in one statement.
    for name in ("store-errors-release-alone", "store-errors-release-with-row"):
        lost: list = []
        with run_workflows() as env, connection.execute_wrapper(_losing_the_release_reply(lost)):
            instance = workflows.get(name).create(params={})
            env.run_until_idle()
            assert len(lost) == 1, name
            row = Instance.objects.get(pk=instance.pk)
            assert (row.status, row.lease_owner, row.wake_at) == ("complete", "", None), name
            env.advance("1 minute")
            row = Instance.objects.get(pk=instance.pk)
            assert (row.status, row.epoch) == ("complete", 1), name
            assert instance.status()["output"] in ("1", 1)
