"""Query and row counts on the hot paths: a step, a replay, a whole journal."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows import workflows
from django_workflows.models import Instance, Step
from django_workflows.engine.replay import replay


def _statements(ctx):
    return [q["sql"] for q in ctx.captured_queries]


def test_a_happy_path_step_writes_one_row_in_one_statement(workflows_env):
    small = workflows.get("loop").create(params={"n": 1})
    big = workflows.get("loop").create(params={"n": 101})
    workflows_env.executor.reset()
    counts = {}
    for instance in (small, big):
        with CaptureQueriesContext(connection) as ctx:
            replay(instance.pk)
        counts[instance.pk] = len(ctx.captured_queries)
    # 100 more steps cost exactly 100 more statements, each one INSERT of one journal row.
    assert counts[big.pk] - counts[small.pk] == 100
    assert Step.objects.filter(instance_id=big.pk).count() == 101


def test_each_step_statement_is_a_single_fenced_insert(workflows_env):
    instance = workflows.get("loop").create(params={"n": 3})
    workflows_env.executor.reset()
    with CaptureQueriesContext(connection) as ctx:
        replay(instance.pk)
    inserts = [sql for sql in _statements(ctx) if sql.startswith("INSERT INTO")]
    assert len(inserts) == 3
    assert all('"django_workflows_step"' in sql and "epoch" in sql and "RETURNING" in sql for sql in inserts)
    # take the lease (which reads the instance), 3 steps, finish: a first replay has no journal to read
    assert len(ctx.captured_queries) == 5, _statements(ctx)
    assert not [sql for sql in _statements(ctx) if sql.startswith("SELECT")]


def test_a_replay_loads_1000_journaled_steps_in_one_query(workflows_env):
    instance = workflows.get("loop").create(params={"n": 1000, "then_sleep": True})
    workflows_env.run_until_idle()
    assert Step.objects.filter(instance_id=instance.pk).count() == 1001
    Instance.objects.filter(pk=instance.pk)  # waiting on its sleep
    workflows_env.clock.advance(__import__("datetime").timedelta(hours=1))
    with CaptureQueriesContext(connection) as ctx:
        assert replay(instance.pk)
    assert instance.status()["output"] == sum(range(1000))
    statements = _statements(ctx)
    if connection.vendor == "postgresql":
        # The lease taken, the sleep marked done and the journal read by one statement; then the finish:
        # none per journaled step.
        assert len(statements) == 2, statements
        assert statements[0].startswith("WITH taken AS (UPDATE") and "django_workflows_step" in statements[0]
    else:
        journal_reads = [sql for sql in statements if sql.startswith("SELECT") and "django_workflows_step" in sql]
        assert len(journal_reads) == 1
        # take the lease, mark the sleep done, read the journal, finish (4): none per journaled step.
        assert len(statements) == 4, statements


def test_a_wait_that_receives_a_buffered_event_costs_a_bounded_number_of_queries(workflows_env):
    instance = workflows.get("race").create()
    instance.send_event(type="payment-success", payload={})
    workflows_env.executor.reset()
    with CaptureQueriesContext(connection) as ctx:
        replay(instance.pk)
    assert instance.status()["status"] == "complete"
    # take the lease, find event, insert step, mark event consumed, finish (5)
    # (plus the savepoint statements of the consuming transaction on some backends)
    non_savepoint = [s for s in _statements(ctx) if "SAVEPOINT" not in s]
    assert len(non_savepoint) == 5, non_savepoint


@pytest.mark.django_db(transaction=True)
def test_create_outside_a_transaction_is_one_insert_then_the_replay(settings, monkeypatch):
    from django_workflows import executors

    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}
    executors.reset()
    transactions = []
    set_autocommit = connection.set_autocommit

    def counting(autocommit, **kwargs):
        if not autocommit:  # a transaction begins (a new connection sets it to True)
            transactions.append(autocommit)
        return set_autocommit(autocommit, **kwargs)

    monkeypatch.setattr(connection, "set_autocommit", counting)
    try:
        with CaptureQueriesContext(connection) as ctx:
            instance = workflows.get("loop").create(params={"n": 3})
    finally:
        executors.reset()
    assert instance.status()["status"] == "complete"
    statements = _statements(ctx)
    # No transaction around it: the INSERT commits alone (a round trip and a BEGIN fewer on
    # PostgreSQL), then the replay runs.
    assert transactions == []
    assert statements[0].startswith("INSERT INTO") and "django_workflows_instance" in statements[0]
    assert not [sql for sql in statements if "SAVEPOINT" in sql]
    # The INSERT takes the replay's lease (no UPDATE takes it), then 3 steps and the finish.
    statements = [sql for sql in statements if sql.split(None, 1)[0] not in ("BEGIN", "COMMIT")]
    assert [sql.split(None, 1)[0] for sql in statements] == ["INSERT", "INSERT", "INSERT", "INSERT", "UPDATE"]
    assert "lease_owner" in statements[-1], statements


def test_a_due_instance_is_claimed_replayed_and_released_in_two_statements(workflows_env):
    """The herd's path, instance by instance: the wake-up loop's claim of the due instances (one statement
    for up to WAKE_BATCH of them), then each replay of a sleep followed by a step: on PostgreSQL the
    statement that takes the lease also marks the sleep done and reads the journal, and the step's row
    (kept, as run() returns straight after it) is written by the statement that completes the instance.
    SQLite has no data-modifying WITH: the sleep, the journal, the row and the release are a statement
    each there, in-process, with no round trip."""
    from django_workflows.engine import replay_tasks
    from django_workflows.store.dispatch import wake_due

    count = 10
    created = [workflows.get("napper").create(params={"duration": "1 hour"}) for _ in range(count)]
    workflows_env.run_until_idle()
    assert {instance.status()["status"] for instance in created} == {"waiting"}
    workflows_env.clock.advance(__import__("datetime").timedelta(hours=2))
    with CaptureQueriesContext(connection) as ctx:
        assert wake_due() == count
        replay_tasks.run_replays(list(workflows_env.executor.queue))
    assert {instance.status()["status"] for instance in created} == {"complete"}
    statements = [sql for sql in _statements(ctx) if not sql.startswith(("SAVEPOINT", "RELEASE"))]
    claims = [sql for sql in statements if "AS due_0" in sql]
    assert len(claims) == 1, statements
    per_instance = (len(statements) - len(claims)) / count
    assert per_instance == (2 if connection.vendor == "postgresql" else 5), statements
    if connection.vendor == "postgresql":
        releases = [sql for sql in statements if sql.startswith("WITH kept AS (INSERT")]
        assert len(releases) == count and all("lease_owner = ''" in sql for sql in releases), statements
    # The sleep is journaled as over at its wake time, as the replay that reached it would have.
    assert Step.objects.filter(kind="sleep", status="succeeded").count() == count


def test_the_take_binds_only_what_changes_from_one_replay_to_the_next(workflows_env):
    """On PostgreSQL Django binds parameters on the client, each turned into a literal before every
    execution, and on SQLite a status bound beside the partial indexes on it has the statement prepared
    again at every run: the take's statuses, workflow names and queues are written into its text once per
    process, and only the instance, the holder and the times stay parameters."""
    instance = workflows.get("loop").create(params={"n": 1})
    workflows_env.executor.reset()
    bound = []

    def record(execute, sql, params, many, context):
        bound.append((sql, len(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        replay(instance.pk)
    sql, take = next((sql, count) for sql, count in bound if "lease_owner = %s" in sql)
    # 56 on e21029f, with this project's workflows. The instance's id is bound once for each of its
    # values that bound the look for one to start instead (leases._preferred_sql says why).
    assert take <= 11, sql
    assert instance.status()["status"] == "complete"


def test_values_written_into_a_statement_read_back_as_they_were(db):
    from django_workflows.store.literals import Varying, bind

    text = "100% o'clock; %s"
    sql, params = bind(connection, "SELECT %s, %s, %s", [text, Varying(7), 3])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert tuple(cursor.fetchone()) == (text, 7, 3)
    assert params == [7]
