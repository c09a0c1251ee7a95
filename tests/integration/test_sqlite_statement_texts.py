"""On SQLite the engine's hot statements convert their placeholders once per text, not at every run
(store/prepared.py): Django's cursor runs a regular expression over each statement it executes. And their
text values that are str subclasses are bound through registered adapters."""

import pytest
from django.db import connection
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

from django_workflows import workflows
from django_workflows.models import Instance, InstanceStatus, ParentEndPolicy, Step, StepKind, StepStatus
from django_workflows.store import prepared

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
