"""On PostgreSQL with ``prepare_threshold`` set, the engine's hot statements are prepared once on a
connection under names of the engine's own and run by name (store/named_statements.py): only where
their transaction is what the cursor would give them, raising what the cursor would raise."""

import psycopg
import pytest
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from django_workflows import workflows
from django_workflows.client.new_instances import unsaved
from django_workflows.errors import InstanceAlreadyExists
from django_workflows.models import Instance, Step
from django_workflows.store import instance_rows, named_statements
from tests.own_connections import dsn

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("inline_executor")]


def _reconnect_with_threshold(monkeypatch, threshold: int) -> None:
    options = {**connection.settings_dict.get("OPTIONS", {}), "prepare_threshold": threshold}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    connection.close()
    connection.ensure_connection()


@pytest.fixture
def reconnect(monkeypatch):
    """Reconnect with a ``prepare_threshold`` of the test's: a connection of its own, nothing prepared on
    it yet, closed after the test whatever it asserted (its settings are put back)."""
    yield lambda threshold: _reconnect_with_threshold(monkeypatch, threshold)
    connection.close()


@pytest.fixture
def fresh_connection(reconnect):
    """The test's statements on a connection of their own where a statement is prepared at its first run
    (``prepare_threshold`` 0)."""
    reconnect(0)


@pytest.fixture
def named_runs(monkeypatch):
    """The statements ``named_statements.run`` ran by name (not left to the cursor), refused ones too."""
    ran = []
    run = named_statements.run

    def counting(db, sql, params, fetch):
        try:
            rows = run(db, sql, params, fetch)
        except Exception:
            ran.append(sql)
            raise
        if rows is not named_statements.NOT_RUN:
            ran.append(sql)
        return rows

    monkeypatch.setattr(named_statements, "run", counting)
    return ran


def _row(instance_id: str) -> Instance:
    """A new instance of a registered workflow, unsaved, for ``instance_rows.insert``."""
    now = timezone.now()
    return unsaved(workflow_name="returns-its-last-step", instance_id=instance_id, status="queued",
                   created_at=now, updated_at=now, turn_at=now)


def _prepared() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, statement FROM pg_prepared_statements")
        return dict(cursor.fetchall())


def test_the_instance_insert_the_journal_rows_and_the_release_are_prepared_under_the_engines_names(fresh_connection):
    for n in range(3):
        workflows.get("returns-its-last-step").create(id=f"named-{n}")
    assert Instance.objects.filter(status="complete").count() == 3 and Step.objects.count() == 9
    prepared = _prepared()
    step_table, instance_table = Step._meta.db_table, Instance._meta.db_table
    engines = {name: text for name, text in prepared.items() if name.startswith("_dw_")}
    # Each prepared once, at its first run (the threshold is 0): three texts, three names.
    assert sorted(text.split(" (")[0] for text in engines.values()) == [
        f'INSERT INTO "{instance_table}"', f'INSERT INTO "{step_table}"', f'WITH kept AS'], prepared
    assert all("$1" in text and "%s" not in text for text in engines.values())
    # None of them prepared by psycopg as well.
    assert not any(text in engines.values() for name, text in prepared.items() if not name.startswith("_dw_"))


def test_a_duplicate_id_raises_as_it_did_and_the_connection_goes_on(fresh_connection, named_runs):
    handle = workflows.get("returns-its-last-step")
    handle.create(id="dup")
    named_runs.clear()
    with pytest.raises(InstanceAlreadyExists):
        handle.create(id="dup")
    assert any(sql.startswith(f'INSERT INTO "{Instance._meta.db_table}"') for sql in named_runs), named_runs
    handle.create(id="after")
    assert Instance.objects.get(instance_id="after").status == "complete"


def test_a_duplicate_id_inserted_by_name_is_djangos_integrity_error(fresh_connection, named_runs):
    workflows.get("returns-its-last-step").create(id="taken")
    row = _row("taken")
    with pytest.raises(IntegrityError):
        instance_rows.insert(row, "default")
    # The create's four statements (its insert holding the lease, two journal rows, the last with the
    # release), then this insert, refused by the server.
    assert len(named_runs) == 5 and named_runs[-1].startswith(f'INSERT INTO "{Instance._meta.db_table}"')


def test_in_a_transaction_the_statements_are_left_to_the_cursor(fresh_connection, named_runs):
    row = _row("rolled-back")
    with pytest.raises(RuntimeError), transaction.atomic():
        # Run by name, the first INSERT would commit by itself (no BEGIN sent yet); the second would be
        # lost with every named statement should psycopg deallocate them all at a rollback.
        instance_rows.insert(row, "default")
        instance_rows.insert(_row("rolled-back-2"), "default")
        raise RuntimeError("roll back")
    assert named_runs == []
    assert not Instance.objects.filter(instance_id__startswith="rolled-back").exists()


def test_a_connection_killed_between_statements_raises_djangos_error_and_the_next_connection_runs_them(
        fresh_connection, named_runs):
    handle = workflows.get("returns-its-last-step")
    handle.create(id="before")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(**dsn(), autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])
    row = _row("killed")
    with pytest.raises(OperationalError):
        instance_rows.insert(row, "default")
    connection.close()
    named_runs.clear()
    handle.create(id="after")
    assert Instance.objects.get(instance_id="after").status == "complete"
    assert len(named_runs) == 4  # prepared again on the new connection, and run by name
    assert not Instance.objects.filter(instance_id="killed").exists()


def test_statements_psycopg_drops_at_a_rollback_are_prepared_again(fresh_connection, named_runs):
    handle = workflows.get("returns-its-last-step")
    handle.create(id="first")
    assert len([name for name in _prepared() if name.startswith("_dw_")]) == 3
    # The engine runs some statements on its cursor itself (a batch's INSERT): psycopg prepares them,
    # and then deallocates every statement of the connection at its next rollback, the named ones too.
    for n in range(8):
        handle.create_batch([{"id": f"batch-{n}"}])
    with pytest.raises(RuntimeError), transaction.atomic():
        Instance.objects.filter(instance_id="first").update(current_step="x")
        raise RuntimeError("roll back")
    assert [name for name in _prepared() if name.startswith("_dw_")] == []
    named_runs.clear()
    handle.create(id="after-rollback")
    assert Instance.objects.get(instance_id="after-rollback").status == "complete"
    assert len(named_runs) == 4
    assert len([name for name in _prepared() if name.startswith("_dw_")]) == 3


def test_statements_dropped_on_the_server_are_prepared_again(fresh_connection, named_runs):
    handle = workflows.get("returns-its-last-step")
    handle.create(id="before-discard")
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # as a pooler's reset query does
    handle.create(id="after-discard")
    assert Instance.objects.get(instance_id="after-discard").status == "complete"
    assert len([name for name in _prepared() if name.startswith("_dw_")]) == 3


def test_past_the_most_kept_the_statement_named_first_is_deallocated(fresh_connection, named_runs, monkeypatch):
    monkeypatch.setattr(named_statements, "_MOST_NAMES", 2)
    for n in range(2):
        workflows.get("returns-its-last-step").create(id=f"evicting-{n}")
    assert Instance.objects.filter(instance_id__startswith="evicting-", status="complete").count() == 2
    assert len(named_runs) == 8  # every statement by name, the last ones too
    named = {name: text for name, text in _prepared().items() if name.startswith("_dw_")}
    # Three texts took turns in two places: the newest two are kept, under names never given before.
    assert len(named) == 2 and all(int(name[4:]) >= 2 for name in named), named
    assert any(text.startswith("WITH kept AS") for text in named.values()), named


def test_a_statement_is_named_once_it_has_run_prepare_threshold_times_on_the_connection(reconnect, named_runs):
    reconnect(2)
    handle = workflows.get("returns-its-last-step")
    step_row = f'INSERT INTO "{Step._meta.db_table}"'

    def named():
        return sorted(text.split(" (")[0] for name, text in _prepared().items() if name.startswith("_dw_"))

    handle.create(id="first")
    # Each run once or twice (the step row twice): sent unnamed, parsed at each run, as psycopg sends a
    # statement it has not prepared.
    assert named() == []
    handle.create(id="second")  # the step row's third run: named; the others' second
    assert named() == [step_row]
    handle.create(id="third")
    assert named() == [f'INSERT INTO "{Instance._meta.db_table}"', step_row, "WITH kept AS"]
    assert Instance.objects.filter(status="complete").count() == 3
