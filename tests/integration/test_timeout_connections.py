"""An attempt interrupted by its timeout leaves nothing behind in the database.

The step bodies here spend nearly all their time inside Django's and the driver's code (a transaction
around one query, over and over), so the interruption lands there, in the middle of a BEGIN, a query
or a COMMIT. Whatever state that leaves the body's connection in, the attempt is failed as timed out
and retried by its policy, and the journal goes on as if nothing happened: no transaction stays open,
no lock outlives the attempt, no journal row is lost, no instance is parked as poison.
"""

import sqlite3
from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from django.db import InterfaceError, close_old_connections, connection, transaction
from django.db.models import F

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Step
from django_workflows.engine.replay import replay
from django_workflows.testing import run_workflows
from tests.own_connections import dsn
from tests.testapp.models import SideEffect

INSTANCES = 30
STEPS = 5
TIMED_OUT_PER_STEP = 2  # 30 instances x 5 steps x 2 = 300 interrupted attempts

# Attempts started, by (instance id, step name): a step's first attempts run until interrupted, the
# next one finishes at once.
started = Counter()


def database_heavy(instance_id: str, name: str, writes: bool):
    def attempt():
        started[instance_id, name] += 1
        if started[instance_id, name] > TIMED_OUT_PER_STEP:
            with transaction.atomic():
                SideEffect.objects.filter(name=instance_id).update(count=F("count") + 1)
            return started[instance_id, name]
        while True:
            with transaction.atomic():
                if writes:
                    # Takes SQLite's write lock, or the row's lock on PostgreSQL, until the commit.
                    SideEffect.objects.filter(name=instance_id).update(count=F("count") + 1)
                else:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT 1")

    return attempt


class DatabaseHeavy(WorkflowEntrypoint):
    """Steps that time out inside their own transactions, then succeed."""

    name = "database-heavy-timeouts"

    def run(self, event, step):
        results = []
        for number in range(STEPS):
            name = f"query-{number}"
            # Half the steps retry at once, in the same replay: the next attempt uses the connection
            # right after the interrupted one. The others wait a second: the journal row that records
            # the timed-out attempt, and the lease's release, are written right after it.
            delay = 0 if number % 2 else "1 second"
            # Retries to spare: on a loaded machine an attempt meant to succeed may outlive 30 ms too
            # (opening a new connection included); it is then a timeout like the others, and retried.
            config = {"timeout": "30 milliseconds",
                      "retries": {"limit": 30, "delay": delay, "backoff": "constant"}}
            results.append(step.do(name, database_heavy(event.instance_id, name, writes=number < 3),
                                   config=config))
        return results


# Only the tests here see it.
registry.unregister(DatabaseHeavy)


@pytest.fixture
def database_heavy_workflow():
    started.clear()
    registry.register(DatabaseHeavy)
    yield DatabaseHeavy
    registry.unregister(DatabaseHeavy)
    started.clear()



def left_behind() -> list[str]:
    """What a replay left open or broken, seen from outside it and on its own connection."""
    left = []
    raw = connection.connection
    if connection.vendor == "sqlite":
        if raw is not None and raw.in_transaction:
            left.append("the replay's connection is inside a transaction")
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # SQLite's one write lock: free at once, or held by someone
            other.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            left.append(f"another connection cannot take the write lock: {exc}")
        finally:
            other.close()
        return left
    if raw is not None and raw.closed:
        left.append("the replay's connection was closed under Django: the next statement on it fails")
    elif raw is not None and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        left.append(f"the replay's connection is {raw.info.transaction_status.name}")
    with psycopg.connect(**dsn(), autocommit=True) as other:
        rows = other.execute(
            "SELECT pid, state, query FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
        ).fetchall()
        left += [f"backend {pid} is {state} after {query!r}" for pid, state, query in rows]
        locks = other.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.datname = current_database() AND l.pid <> pg_backend_pid() "
            "AND l.locktype IN ('tuple', 'transactionid') AND l.granted"
        ).fetchone()[0]
        if locks:
            left.append(f"{locks} row or transaction locks are held")
    return left


def run_checking_each_replay(env) -> int:
    """``run_until_idle()``, looking after every replay for what it may have left open, then closing
    the connection if the replay left it unusable, as a worker does between tasks."""
    ran = 0
    while True:
        if env.executor.queue:
            pk = env.executor.queue.popleft()
        else:
            pk = Instance.objects.due(env.now).order_by("wake_at", "pk").values_list("pk", flat=True).first()
            if pk is None:
                return ran
        replay(pk)
        ran += 1
        left = left_behind()
        assert not left, f"after replay {ran} (instance {pk}): {left}"
        close_old_connections()


@pytest.mark.django_db(transaction=True)
def test_300_timeouts_inside_database_calls_leave_no_transaction_lock_lost_row_or_poison(
    database_heavy_workflow
):
    ids = [f"heavy-{n}" for n in range(INSTANCES)]
    SideEffect.objects.bulk_create([SideEffect(name=instance_id) for instance_id in ids])
    with run_workflows() as env:
        for instance_id in ids:
            workflows.get(DatabaseHeavy.name).create(id=instance_id)
        for _ in range(200):
            run_checking_each_replay(env)
            if not Instance.objects.filter(workflow_name=DatabaseHeavy.name, status="waiting").exists():
                break
            env.clock.advance(timedelta(seconds=1))

    # What was committed, read on a new connection: the replays' connection had nothing left to commit.
    connection.close()
    instances = list(Instance.objects.filter(workflow_name=DatabaseHeavy.name))
    assert len(instances) == INSTANCES
    assert Counter(row.status for row in instances) == {"complete": INSTANCES}, [
        (row.instance_id, row.status, row.error, row.traceback[-2000:],
         list(Step.objects.filter(instance_id=row.pk).values_list("key", "status", "attempts")))
        for row in instances if row.status != "complete"
    ]
    assert [row.instance_id for row in instances if row.crash_count or row.error or row.lease_owner] == []

    steps = list(Step.objects.filter(instance__workflow_name=DatabaseHeavy.name))
    assert len(steps) == INSTANCES * STEPS
    assert len({(step.instance_id, step.key) for step in steps}) == INSTANCES * STEPS
    assert Counter(step.status for step in steps) == {"succeeded": INSTANCES * STEPS}
    failures = Counter(
        attempt["error"]["name"] for step in steps for attempt in step.attempts if not attempt["success"]
    )
    # Every failed attempt was a timeout (none a "database is locked", "cannot start a transaction
    # within a transaction" or "another command is already in progress"), and each one is journaled.
    assert set(failures) == {"StepTimeoutError"}
    assert failures["StepTimeoutError"] >= INSTANCES * STEPS * TIMED_OUT_PER_STEP
    assert all(step.attempts[-1]["success"] for step in steps)
    # Each step's body finished once, in the last attempt that started it: its result is how many of its
    # attempts had started the body by then (on a loaded machine an attempt can be interrupted before
    # its body's first line, and is journaled as a timeout having started none).
    by_pk = {row.pk: row.instance_id for row in instances}
    assert sorted((by_pk[step.instance_id], step.name, step.result) for step in steps) == sorted(
        (instance_id, name, count) for (instance_id, name), count in started.items())
    assert all(step.result <= len(step.attempts) for step in steps)


# -- one interrupted attempt, closer up --------------------------------------------------------------

swallowed = Counter()


class Stubborn(WorkflowEntrypoint):
    """A body that catches the interruption inside its own transaction, with a bare ``except:``: it
    then returns as if done, or raises the error a rollback on a broken connection raises."""

    name = "stubborn-timeouts"

    def run(self, event, step):
        def stubborn():
            swallowed["attempts"] += 1
            if swallowed["attempts"] > 1:
                return "second attempt"
            for _ in range(10**9):
                try:
                    with transaction.atomic():
                        SideEffect.objects.filter(name="stubborn").update(count=F("count") + 1)
                except:  # noqa: E722 - what the engine must not be fooled by
                    swallowed["interruptions"] += 1
                    if event.payload["then"] == "raise":
                        raise InterfaceError("connection already closed") from None
                    break
            return "swallowed it"

        return step.do("stubborn", stubborn, config={"timeout": "30 milliseconds",
                                                     "retries": {"limit": 1, "delay": 0}})


class CallsAStepFromAStep(WorkflowEntrypoint):
    name = "step-inside-a-step"

    def run(self, event, step):
        try:
            return step.do("outer", lambda: step.do("inner", lambda: 1))
        except Exception:
            return "caught"


registry.unregister(Stubborn)
registry.unregister(CallsAStepFromAStep)


@pytest.fixture
def register():
    registered = []

    def register(cls):
        registry.register(cls)
        registered.append(cls)

    yield register
    for cls in registered:
        registry.unregister(cls)


@pytest.mark.parametrize("then", ["return", "raise"])
@pytest.mark.django_db(transaction=True)
def test_an_interrupted_attempt_is_a_timeout_whatever_it_does_with_the_interruption(register, then):
    register(Stubborn)
    swallowed.clear()
    SideEffect.objects.create(name="stubborn")
    with run_workflows() as env:
        instance = workflows.get(Stubborn.name).create(id="stubborn", params={"then": then})
        run_checking_each_replay(env)
    assert swallowed["interruptions"] == 1
    assert instance.status() == {"status": "complete", "output": "second attempt", "error": None}
    step = Step.objects.get(instance_id=instance.pk)
    assert [(a["success"], a.get("error", {}).get("name")) for a in step.attempts] == [
        (False, "StepTimeoutError"), (True, None)
    ]


def test_a_step_called_inside_another_steps_body_errors_the_instance_and_journals_nothing(
    register, workflows_env
):
    register(CallsAStepFromAStep)
    instance = workflows.get(CallsAStepFromAStep.name).create(id="nested")
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "InvalidStepInput"
    assert "'inner' was called inside the body of step 'outer-1'" in status["error"]["message"]
    assert not Step.objects.filter(instance_id=instance.pk).exists()


def _lock_is_free(row_name: str) -> bool:
    """From another connection: can the row be locked (SQLite: can the database be written) at once?"""
    if connection.vendor == "sqlite":
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            other.close()
    with psycopg.connect(**dsn()) as other:
        try:
            other.execute(f"SELECT 1 FROM {SideEffect._meta.db_table} WHERE name = %s FOR UPDATE NOWAIT",
                          [row_name])
            return True
        except psycopg.errors.LockNotAvailable:
            return False


def _begin_unknown_to_django():
    """As an interruption right after Django's BEGIN can leave it: Django believes it is in autocommit."""
    with connection.cursor() as cursor:
        cursor.execute("BEGIN IMMEDIATE" if connection.vendor == "sqlite" else "BEGIN")


def _atomic_block_never_exited():
    """As an interruption inside ``Atomic.__exit__`` can leave it: Django believes it is still inside."""
    transaction.atomic().__enter__()


@pytest.mark.parametrize("interrupted", [_begin_unknown_to_django, _atomic_block_never_exited])
@pytest.mark.django_db(transaction=True)
def test_discarding_ends_the_interrupted_transaction_and_the_next_statement_opens_a_new_connection(
    interrupted
):
    from django_workflows.engine.interrupted_connections import discard_connections

    SideEffect.objects.create(name="locked", count=1)
    ran_on_commit = []
    interrupted()
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {SideEffect._meta.db_table} SET count = 2 WHERE name = %s", ["locked"])
    if connection.in_atomic_block:
        transaction.on_commit(lambda: ran_on_commit.append(True))
    assert not _lock_is_free("locked")
    old = connection.connection

    discard_connections()

    assert _lock_is_free("locked")
    assert connection.connection is None and not connection.in_atomic_block
    assert SideEffect.objects.get(name="locked").count == 1  # on a new connection: the update rolled back
    assert connection.connection is not old and connection.get_autocommit()
    with transaction.atomic():
        SideEffect.objects.filter(name="locked").update(count=3)
    # Committed, and the interrupted transaction's on_commit callback was dropped with its work.
    assert SideEffect.objects.get(name="locked").count == 3 and ran_on_commit == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_discarding_cancels_a_statement_still_running_and_releases_its_locks_at_once():
    from django_workflows.engine.interrupted_connections import discard_connections

    SideEffect.objects.create(name="locked")
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(f"SELECT 1 FROM {SideEffect._meta.db_table} WHERE name = %s FOR UPDATE", ["locked"])
    # Interrupted between sending a statement and reading its result: "another command is already in
    # progress" for anything else sent on this connection.
    connection.connection.pgconn.send_query(b"SELECT pg_sleep(30) /* interrupted */")

    discard_connections()

    # Rolled back now, not when the server notices the connection is gone (here: after 30 s).
    assert _lock_is_free("locked")
    with psycopg.connect(**dsn(), autocommit=True) as other:
        still_running = other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE %s AND state = 'active'",
            ["%/* interrupted */%"],
        ).fetchone()[0]
    assert still_running == 0


def test_a_transaction_the_attempt_began_in_is_the_callers_and_is_kept(workflows_env):
    from django_workflows.engine.interrupted_connections import callers_transactions, discard_connections

    SideEffect.objects.create(name="the test's own row")
    raw = connection.connection
    callers = callers_transactions()
    assert [wrapper.alias for wrapper in callers] == ["default"]

    discard_connections(keep=callers)

    assert connection.connection is raw and connection.in_atomic_block
    assert SideEffect.objects.filter(name="the test's own row").exists()
    # And a step that times out inside it is failed and retried, the test's transaction going on.
    instance = workflows.get("slow").create()
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert instance.status()["output"] == "fast enough"
    assert connection.connection is raw and SideEffect.objects.filter(name="the test's own row").exists()
