"""The engine's hot statements are prepared on PostgreSQL when the database's OPTIONS set psycopg's
``prepare_threshold`` (store/prepared.py), and only then: Django's default, and a connection logging its
queries, leave them planned at every call as Django's own are."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows import workflows
from django_workflows.models import Instance, Step

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("inline_executor")]


@pytest.fixture
def threshold(monkeypatch):
    """Set the database's ``prepare_threshold`` (None: Django's default) on a connection opened with it."""
    def set_to(value):
        options = dict(connection.settings_dict.get("OPTIONS", {}))
        options.pop("prepare_threshold", None)
        if value is not None:
            options["prepare_threshold"] = value
        monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
        connection.close()
        connection.ensure_connection()
        assert connection.connection.prepare_threshold == value
    yield set_to
    connection.close()


def _prepared() -> list[str]:
    """The statements prepared on the test's connection, where the inline executor runs every replay."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _run_three_step_workflows(count: int) -> None:
    for n in range(count):
        workflows.get("returns-its-last-step").create(id=f"prepared-{n}")
    assert Instance.objects.filter(status="complete").count() == count
    assert Step.objects.count() == 3 * count


def test_with_a_threshold_the_instance_insert_the_journal_rows_and_the_release_are_prepared(threshold):
    threshold(2)
    _run_three_step_workflows(3)
    prepared = _prepared()
    step_table, instance_table = Step._meta.db_table, Instance._meta.db_table
    assert any(text.startswith(f'INSERT INTO "{step_table}"') for text in prepared), prepared
    assert any(text.startswith(f'INSERT INTO "{instance_table}"') for text in prepared), prepared
    # The release that completes an instance, with its last step's row (one statement on PostgreSQL).
    assert any(text.startswith(f'WITH kept AS (INSERT INTO "{step_table}"') and "lease_owner = ''" in text
               for text in prepared), prepared


def test_without_a_threshold_nothing_is_prepared(threshold):
    threshold(None)
    _run_three_step_workflows(3)
    assert _prepared() == []


def test_a_connection_logging_its_queries_shows_them_with_their_values_unprepared(threshold):
    threshold(1)
    with CaptureQueriesContext(connection) as captured:
        _run_three_step_workflows(2)
    assert _prepared() == []
    step_insert = f'INSERT INTO "{Step._meta.db_table}"'
    # The last step's row goes with the release that completes its instance, in one statement.
    inserts = [q["sql"] for q in captured.captured_queries
               if q["sql"].startswith((step_insert, f"WITH kept AS ({step_insert}"))]
    # Each with its values written in, as Django's cursor logs them.
    assert len(inserts) == 6 and all("%s" not in sql and "$1" not in sql for sql in inserts), inserts
