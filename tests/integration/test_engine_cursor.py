"""The engine's hot statements (a new instance's INSERT, a step's journal row, the release) skip Django's
chain of execute wrappers where nothing would see the difference (store/prepared.py), and go through it
wherever something would: a project's execute wrapper, a replaced ``CursorWrapper.execute`` (an error
tracker's), a cursor that logs queries, an atomic body running meanwhile."""

import threading

import pytest
from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.test.utils import CaptureQueriesContext

from django_workflows import workflows
from django_workflows.engine import atomic_steps
from django_workflows.models import Instance, Step

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inline_executor")]

# The statements of a 3-step create() that the engine runs on its cursor: the instance's INSERT, three
# journal rows and the release (on PostgreSQL the last row and the release are one statement).
ENGINE = {"sqlite": 5, "postgresql": 4}


def _engine_statements(sqls):
    instances, steps = Instance._meta.db_table, Step._meta.db_table
    starts = (f'INSERT INTO "{instances}"', f'INSERT INTO "{steps}"', f'UPDATE "{instances}" SET lease_owner',
              "WITH kept AS")
    return [sql for sql in sqls if sql.startswith(starts)]


def _create(name):
    workflows.get("returns-its-last-step").create(id=name)
    assert Instance.objects.get(instance_id=name).status == "complete"


def test_nothing_watching_the_statements_skip_the_wrapper_chain(monkeypatch):
    _create("warm-up")
    chained = []
    chain = CursorWrapper._execute_with_wrappers

    def counting(self, sql, params, many, executor):
        chained.append(sql)
        return chain(self, sql, params, many, executor)

    monkeypatch.setattr(CursorWrapper, "_execute_with_wrappers", counting)
    _create("direct")
    assert _engine_statements(chained) == []


def test_an_execute_wrapper_of_the_project_sees_every_statement():
    _create("warm-up")
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        _create("wrapped")
    assert len(_engine_statements(seen)) == ENGINE[connection.vendor], seen


def test_a_replaced_execute_sees_every_statement(monkeypatch):
    _create("warm-up")
    seen = []
    execute = CursorWrapper.execute

    def recording(self, sql, params=None):  # as an error tracker records queries
        seen.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", recording)
    _create("recorded")
    assert len(_engine_statements(seen)) == ENGINE[connection.vendor], seen


def test_a_cursor_that_logs_queries_logs_every_statement():
    _create("warm-up")
    with CaptureQueriesContext(connection) as logged:
        _create("logged")
    assert len(_engine_statements([query["sql"] for query in logged.captured_queries])) == ENGINE[connection.vendor]


def test_while_an_atomic_body_runs_the_watch_of_other_threads_writes_sees_every_statement(monkeypatch):
    _create("warm-up")
    noted = []
    # An atomic body running in another thread, for the time of the create(): the watch looks at every
    # statement of the process (and passes over the replays' own, which is not what is tested here).
    monkeypatch.setitem(atomic_steps._running, threading.get_ident() + 1, atomic_steps._Watch("elsewhere"))
    monkeypatch.setattr(atomic_steps, "_note", lambda connection, sql: noted.append(sql))
    _create("observed")
    assert len(_engine_statements(noted)) == ENGINE[connection.vendor], noted
