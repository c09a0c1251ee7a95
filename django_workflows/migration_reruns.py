"""Django's plain migration operations, made safe to run again in a migration that is not atomic.

A migration that is not atomic (one that builds an index ``CONCURRENTLY``, or adds columns to the busy
instance table without holding its lock across all of them) commits each statement on its own, and
Django records it as applied only after its last. Stopped in between (a cancelled deploy, a
``lock_timeout`` on the record's INSERT), it is run again whole by the next ``migrate``, and a plain
``AddField`` then fails with "column already exists", which stops every later deploy until someone
repairs the database by hand. Each operation here runs in one transaction and passes over its table,
column, index or constraint when the catalog already holds it.
"""

from __future__ import annotations

import contextlib

from django.db import migrations, transaction
from django.db.migrations.operations.base import Operation


def _introspection_says(schema_editor, look) -> bool:
    """What Django's introspection of the database says, on any database. ``sqlmigrate`` prints every
    statement, as for a database that holds none of it yet."""
    if schema_editor.collect_sql:
        return False
    with schema_editor.connection.cursor() as cursor:
        return look(schema_editor.connection.introspection, cursor)


def table_exists(schema_editor, table: str) -> bool:
    return _introspection_says(schema_editor, lambda found, cursor: table in found.table_names(cursor))


def column_exists(schema_editor, table: str, column: str) -> bool:
    return _introspection_says(schema_editor, lambda found, cursor: any(
        description.name == column for description in found.get_table_description(cursor, table)))


def index_or_constraint_exists(schema_editor, table: str, name: str) -> bool:
    return _introspection_says(schema_editor, lambda found, cursor: name in found.get_constraints(cursor, table))


@contextlib.contextmanager
def _whole(schema_editor):
    """One transaction for an operation's work, with the statements Django defers to the migration's end
    (a field's index, a foreign key's constraint) run inside it: stopped at any point, the database
    holds all of the operation's work or none of it, which is what a look in the catalog can tell."""
    deferred = len(schema_editor.deferred_sql)
    with transaction.atomic(using=schema_editor.connection.alias):
        yield
        for sql in schema_editor.deferred_sql[deferred:]:
            schema_editor.execute(sql)
        del schema_editor.deferred_sql[deferred:]


class _Once(Operation):
    """An operation of Django's, run in one transaction and passed over when its work is there already:
    in a migration that is not atomic, a run after a stop finds the work of the operations that ran."""

    def _done(self, schema_editor, model) -> bool:
        raise NotImplementedError

    def _model_name(self) -> str:
        return self.model_name  # type: ignore[attr-defined]  # every subclass's operation has one

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self._model_name())
        if self.allow_migrate_model(schema_editor.connection.alias, model) and self._done(schema_editor, model):
            return
        with _whole(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)


class CreateModelOnce(_Once, migrations.CreateModel):
    def _model_name(self) -> str:
        return self.name

    def _done(self, schema_editor, model) -> bool:
        return table_exists(schema_editor, model._meta.db_table)


class AddFieldOnce(_Once, migrations.AddField):
    def _done(self, schema_editor, model) -> bool:
        return column_exists(schema_editor, model._meta.db_table, model._meta.get_field(self.name).column)


class AddIndexOnce(_Once, migrations.AddIndex):
    def _done(self, schema_editor, model) -> bool:
        return index_or_constraint_exists(schema_editor, model._meta.db_table, self.index.name)


class AddConstraintOnce(_Once, migrations.AddConstraint):
    def _done(self, schema_editor, model) -> bool:
        return index_or_constraint_exists(schema_editor, model._meta.db_table, self.constraint.name)


class RemoveConstraintOnce(_Once, migrations.RemoveConstraint):
    def _done(self, schema_editor, model) -> bool:
        return not index_or_constraint_exists(schema_editor, model._meta.db_table, self.name)
