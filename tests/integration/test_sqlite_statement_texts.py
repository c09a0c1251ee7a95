"""On SQLite the engine's hot statements convert their placeholders once per text, not at every run
(store/prepared.py): Django's cursor runs a regular expression over each statement it executes."""

import pytest
from django.db.backends.sqlite3.base import SQLiteCursorWrapper

from django_workflows import workflows
from django_workflows.models import Instance, Step
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
