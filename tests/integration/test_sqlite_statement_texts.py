"""On SQLite the engine's hot statements convert their placeholders once per text, not at every run
(store/prepared.py): Django's cursor runs a regular expression over each statement it executes. And their
text values that are str subclasses are bound through registered adapters."""

import pytest
from django.db import connection
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

from django_workflows import workflows
from django_workflows.models import Instance, InstanceStatus, ParentEndPolicy, Step, StepKind, StepStatus
from django_workflows.store import instance_rows, prepared

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("inline_executor")]


def test_the_engine_converts_each_statement_text_once(monkeypatch):
    prepared._converting_once.cache_clear()  # texts converted by earlier tests are forgotten
    converted = []
    convert = SQLiteCursorWrapper.convert_query

    def counting(self, query, *, param_names=None):
        converted.append(query)
        return convert(self, query, param_names=param_names)

    monkeypatch.setattr(SQLiteCursorWrapper, "convert_query", counting)
    step_table, instance_table = Step._meta.db_table, Instance._meta.db_table

    def engine_conversions(count, prefix):
        converted.clear()
        for n in range(count):
            workflows.get("returns-its-last-step").create(id=f"{prefix}-{n}")
        return [query for query in converted
                if query.startswith((f'INSERT INTO "{step_table}"', f'INSERT INTO "{instance_table}"'))]

    first = engine_conversions(3, "first")
    assert first, "the journal's and the instance's INSERTs ran on SQLite's cursor"
    # Later workflows run the same texts, converted already: none of them is converted again, where
    # Django's cursor converts each at every run (3 journal rows and an instance a workflow).
    assert engine_conversions(5, "later") == []
    assert Instance.objects.filter(status="complete").count() == 8


def test_the_engine_binds_its_text_values_through_registered_adapters():
    """sqlite3 binds a str subclass only after looking for an adapter: in its registry, then as two
    attributes, each failed lookup raising and dropping an AttributeError. The engine's statuses, kinds
    and encoded JSON are in the registry, and bound as the same text."""
    import sqlite3

    from django_workflows.store.journal_values import Encoded

    workflows.get("returns-its-last-step").create(id="adapted")
    for text_type in (Encoded, InstanceStatus, ParentEndPolicy, StepKind, StepStatus):
        assert (text_type, sqlite3.PrepareProtocol) in sqlite3.adapters, text_type
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT typeof(kind), kind, typeof(status), status, typeof(result) FROM "{Step._meta.db_table}"')
        assert set(cursor.fetchall()) == {("text", "do", "text", "succeeded", "text")}
        cursor.execute(f'SELECT typeof(status), status, typeof(on_parent_end) FROM "{Instance._meta.db_table}"')
        assert cursor.fetchall() == [("text", "complete", "text")]


def test_the_engine_statements_skip_djangos_execute_on_sqlite(monkeypatch):
    """Django's SQLite execute asks whether the parameters are a Mapping (an ABC's isinstance) and converts
    the text at every run: the engine's statements, whose parameters are a list and whose texts are kept
    converted, go to the driver from the engine's cursor."""
    through_django = []
    execute = SQLiteCursorWrapper.execute

    def recording(self, query, params=None):
        through_django.append(query)
        return execute(self, query, params)

    monkeypatch.setattr(SQLiteCursorWrapper, "execute", recording)
    workflows.get("returns-its-last-step").create(id="direct")
    step_table, instance_table = Step._meta.db_table, Instance._meta.db_table
    engine = [query for query in through_django
              if query.startswith((f'INSERT INTO "{step_table}"', f'INSERT INTO "{instance_table}"',
                                   f'UPDATE "{instance_table}"'))]
    assert engine == []
    assert Instance.objects.get(instance_id="direct").status == "complete"
    assert Step.objects.filter(instance__instance_id="direct", status="succeeded").count() == 3


def test_a_new_instance_and_its_steps_adapt_their_times_without_djangos_adapter(monkeypatch):
    """Django's datetime adaptation checks the settings and converts the zone at each call, even for None:
    the engine's own adapts the UTC times it writes, and passes None (most of a new instance's times) as
    it is."""
    adapted = []
    adapt = connection.ops.adapt_datetimefield_value

    def recording(value):
        adapted.append(value)
        return adapt(value)

    monkeypatch.setattr(connection.ops, "adapt_datetimefield_value", recording)
    # The INSERT's shape, made with the adapters of the connection as it was, is made again with this one.
    monkeypatch.setattr(instance_rows, "_shapes", {})
    workflows.get("returns-its-last-step").create(id="adapted-times")
    assert adapted == []
    row = Instance.objects.values("created_at", "started_at", "ended_at", "wake_at", "deadline").get(
        instance_id="adapted-times")
    assert row["created_at"] <= row["started_at"] <= row["ended_at"] and row["wake_at"] is row["deadline"] is None
