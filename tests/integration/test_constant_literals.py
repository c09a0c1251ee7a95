"""The statuses in the WHERE of the take of a lease and of a new instance's INSERT are written into the
statement's text, not bound as parameters (store/literals.py): on SQLite a parameter compared with the
column a partial index's condition names makes SQLite prepare the statement again at every run, and
the instance table has partial indexes on its status."""

import pytest
from django.db import connection

from django_workflows import workflows
from django_workflows.engine.replay import replay
from django_workflows.models import Instance

INSTANCES = f'"{Instance._meta.db_table}"'


class Executed:
    """The statements run on the connection, as the driver gets them: text and parameters."""

    def __init__(self):
        self.statements = []

    def __call__(self, execute, sql, params, many, context):
        self.statements.append((sql, list(params or ())))
        return execute(sql, params, many, context)

    def containing(self, text):
        return [(sql, params) for sql, params in self.statements if text in sql]


def test_the_take_writes_its_statuses_in(workflows_env):
    instance = workflows.get("loop").create(params={"n": 1})
    workflows_env.executor.reset()
    executed = Executed()
    with connection.execute_wrapper(executed):
        replay(instance.pk)
    assert Instance.objects.get(pk=instance.pk).status == "complete"
    # On PostgreSQL the take reads the journal in the same statement (a WITH around the UPDATE).
    [(take, params)] = executed.containing(f"UPDATE {INSTANCES} SET status = CASE")
    assert "status IN ('queued', 'waiting')" in take, take
    assert not {"queued", "waiting", "running", "waitingForPause"} & {p for p in params if isinstance(p, str)}


@pytest.mark.django_db(transaction=True)
def test_a_created_instance_holding_its_lease_writes_the_queued_status_in(inline_executor):
    executed = Executed()
    with connection.execute_wrapper(executed):
        handle = workflows.get("loop").create(params={"n": 1})
    assert handle.status()["status"] == "complete"
    [(insert, params)] = executed.containing(f"INSERT INTO {INSTANCES}")
    assert "b.status = 'queued'" in insert, insert
    # The row's own status, the lease it holds, is its values' to bind; none compared with is.
    assert "queued" not in params


@pytest.mark.django_db(transaction=True)
def test_the_insert_holding_its_lease_is_written_again_for_a_workflow_registered_later(inline_executor):
    """Its text, written once for the workflows this process may take, names one registered since: a
    queued instance of that workflow is one the new instance gives way to."""
    from django_workflows import WorkflowEntrypoint
    from django_workflows.shared.definition import registry

    executed = Executed()
    with connection.execute_wrapper(executed):
        workflows.get("loop").create(params={"n": 1})
    [(first, _)] = executed.containing(f"INSERT INTO {INSTANCES}")
    assert "'registered-later'" not in first

    class RegisteredLater(WorkflowEntrypoint):
        name = "registered-later"

        def run(self, event, step):
            return None

    try:
        executed = Executed()
        with connection.execute_wrapper(executed):
            workflows.get("loop").create(params={"n": 1})
        [(second, _)] = executed.containing(f"INSERT INTO {INSTANCES}")
        assert "'registered-later'" in second, second
    finally:
        registry.unregister(RegisteredLater)


def test_the_wake_up_loop_and_a_woken_replay_write_their_statuses_in(workflows_env):
    from datetime import timedelta

    from django_workflows.store.dispatch import wake_due

    sleeper = workflows.get("sleeper").create(params={})
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(hours=1))
    executed = Executed()
    with connection.execute_wrapper(executed):
        assert wake_due(workflows_env.now) == 1
        workflows_env.run_until_idle()
    assert sleeper.status()["status"] == "complete"
    claims = executed.containing("ORDER BY wake_at LIMIT")  # the test's own loop looks again, too
    assert claims
    for claim, params in claims:
        assert "WHERE status IN ('waiting', 'scheduled', 'queued')" in claim, claim
        assert not {"queued", "waiting", "scheduled"} & {p for p in params if isinstance(p, str)}
    if connection.vendor == "sqlite":
        # SQLite wakes the sleep in a statement of its own (PostgreSQL, in the take's).
        [(woke, params)] = executed.containing("ended_at = wake_at")
        assert "t.status = 'running'" in woke and "kind = 'sleep'" in woke, woke
        assert not {"running", "sleep", "waiting"} & {p for p in params if isinstance(p, str)}


def test_the_next_wake_time_is_read_with_its_statuses_written_in(workflows_env):
    from django_workflows.store.dispatch import next_wake_time

    sleeper = workflows.get("sleeper").create(params={})
    workflows_env.run_until_idle()
    executed = Executed()
    with connection.execute_wrapper(executed):
        wake_at = next_wake_time()
    assert wake_at == Instance.objects.get(pk=sleeper.pk).wake_at is not None
    [(read, params)] = executed.statements
    for status in ("waiting", "scheduled", "queued"):
        assert f"status = '{status}' AND wake_at IS NOT NULL" in read, read
    assert params == []
