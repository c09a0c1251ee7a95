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
    journal_reads = [sql for sql in _statements(ctx) if sql.startswith("SELECT") and "django_workflows_step" in sql]
    assert len(journal_reads) == 1
    # take the lease, read the journal, mark the sleep done, finish (4): none per journaled step.
    assert len(ctx.captured_queries) == 4, _statements(ctx)


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
    # take the lease, 3 steps, finish
    assert len(statements) == 1 + 5, statements
