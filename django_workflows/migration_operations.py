"""Migration operations that a live PostgreSQL database runs without stopping its traffic.

The instance, step and event tables of a running site are large and written all the time. Django's
plain operations build an index or check a constraint under a lock that stops every write to the table
(``CREATE INDEX``) or every read and write (``ALTER TABLE``), for as long as the build or the scan
takes. These operations do the slow part under locks that let reads and writes through
(``CONCURRENTLY``, ``NOT VALID`` then ``VALIDATE CONSTRAINT``) and keep the ``ACCESS EXCLUSIVE`` lock
of ``ALTER TABLE`` for catalog changes only, which take milliseconds. On other databases (SQLite) they
are Django's plain operations, and their resulting model state is the plain operations' in every case.

A migration that uses them must be ``atomic = False``: PostgreSQL builds an index concurrently only
outside a transaction. Each statement then commits on its own, so a migration stopped half-way (a
``lock_timeout``, a cancelled deploy), or after its last statement and before Django recorded it, is run
again whole: every operation in it looks in the catalog whether its work is done, and an index left
invalid by an interrupted build is dropped and built again (``migration_reruns`` holds Django's plain
operations made to do the same).
"""

from __future__ import annotations

import copy

from django.db import NotSupportedError, migrations, models, transaction
from django.db.migrations.operations.base import Operation

from django_workflows.migration_reruns import (
    AddConstraintOnce,
    AddFieldOnce,
    AddIndexOnce,
    RemoveConstraintOnce,
    column_exists,
    index_or_constraint_exists,
)


def _on_postgresql(operation, schema_editor) -> bool:
    if schema_editor.connection.vendor != "postgresql":
        return False
    if schema_editor.connection.in_atomic_block:
        raise NotSupportedError(
            f"{operation.__class__.__name__} cannot run inside a transaction on PostgreSQL: "
            "set atomic = False on the migration."
        )
    return True


def _model_to_migrate(operation, app_label, schema_editor, state):
    """The operation's model as ``state`` has it, or None where the database router keeps the model off
    this database."""
    model = state.apps.get_model(app_label, operation.model_name)
    return model if operation.allow_migrate_model(schema_editor.connection.alias, model) else None


def _catalog_says(schema_editor, sql: str, params) -> bool:
    """Whether the catalog holds what ``sql`` looks for. ``sqlmigrate`` prints every statement, as
    for a database that holds none of it yet."""
    if schema_editor.collect_sql:
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, params)
        return bool(cursor.fetchone()[0])


def _index_is(schema_editor, name: str, *, valid: bool) -> bool:
    return _catalog_says(
        schema_editor,
        "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND indisvalid = %s)",
        [schema_editor.quote_name(name), valid],
    )


def _drop_invalid_index(schema_editor, name: str) -> None:
    """An interrupted ``CREATE INDEX CONCURRENTLY`` leaves an invalid index of the name behind: it
    serves no query, is still updated by every write, and would make the next build fail."""
    if _index_is(schema_editor, name, valid=False):
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")


def _constraint_exists(schema_editor, table: str, name: str) -> bool:
    """A constraint of the name, not an index (``index_or_constraint_exists`` answers for either): a
    unique column's index is built under the name its constraint is then made from."""
    return _catalog_says(
        schema_editor,
        "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname = %s)",
        [schema_editor.quote_name(table), name],
    )


def _add_unique_concurrently(schema_editor, table: str, name: str, columns: list[str]) -> None:
    """A table's UNIQUE constraint ``name`` on ``columns``, unless it has it: its index built
    ``CONCURRENTLY`` first (an invalid one left by an interrupted build dropped), then made the constraint
    (``ADD CONSTRAINT ... UNIQUE USING INDEX``, a catalog change)."""
    if _constraint_exists(schema_editor, table, name):
        return
    quote = schema_editor.quote_name
    _drop_invalid_index(schema_editor, name)
    schema_editor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {quote(name)} ON {quote(table)} "
                          f"({', '.join(quote(column) for column in columns)})")
    schema_editor.execute(f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} UNIQUE USING INDEX {quote(name)}")


def _constraint_name(schema_editor, table: str, column: str, kind: str) -> str:
    """The name PostgreSQL gives a column's own UNIQUE (``key``) or CHECK (``check``) constraint: the
    name the constraint has on databases that were migrated by a plain ``AddField``."""
    name = f"{table}_{column}_{kind}"
    if len(name) > schema_editor.connection.ops.max_name_length():
        raise ValueError(f"{name!r} is longer than PostgreSQL's names: PostgreSQL would have shortened it.")
    return name


class _ConcurrentlyOnPostgreSQL:
    """An operation whose forwards is its own on PostgreSQL (``forwards_on_postgresql``) and the plain
    operation's elsewhere; nothing where the database router keeps the model off the database."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        if _on_postgresql(self, schema_editor):
            self.forwards_on_postgresql(model, schema_editor, from_state)
        else:
            super().database_forwards(app_label, schema_editor, from_state, to_state)  # type: ignore[misc]

    def forwards_on_postgresql(self, model, schema_editor, from_state) -> None:
        raise NotImplementedError


class AddIndexConcurrentlyOnPostgreSQL(_ConcurrentlyOnPostgreSQL, AddIndexOnce):
    """``AddIndex``, built with ``CREATE INDEX CONCURRENTLY`` on PostgreSQL: a plain ``CREATE INDEX``
    stops every write to the table while it reads the whole table and sorts it."""

    def forwards_on_postgresql(self, model, schema_editor, from_state) -> None:
        _drop_invalid_index(schema_editor, self.index.name)
        if not _index_is(schema_editor, self.index.name, valid=True):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, from_state)) is None:
            return
        if _on_postgresql(self, schema_editor):
            schema_editor.remove_index(model, self.index, concurrently=True)
        else:
            schema_editor.remove_index(model, self.index)


class RemoveIndexConcurrentlyOnPostgreSQL(migrations.RemoveIndex):
    """``RemoveIndex``, dropped with ``DROP INDEX CONCURRENTLY`` on PostgreSQL: a plain ``DROP INDEX``
    takes an ``ACCESS EXCLUSIVE`` lock on the table, and in an atomic migration keeps it until the
    migration's last statement, an index build maybe."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, from_state)) is None:
            return
        index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
        if _on_postgresql(self, schema_editor):
            schema_editor.remove_index(model, index, concurrently=True)  # DROP INDEX ... IF EXISTS
        elif index_or_constraint_exists(schema_editor, model._meta.db_table, index.name):
            schema_editor.remove_index(model, index)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
        if not _on_postgresql(self, schema_editor):
            schema_editor.add_index(model, index)
            return
        _drop_invalid_index(schema_editor, index.name)
        if not _index_is(schema_editor, index.name, valid=True):
            schema_editor.add_index(model, index, concurrently=True)


class AddFieldConcurrentlyOnPostgreSQL(_ConcurrentlyOnPostgreSQL, AddFieldOnce):
    """``AddField`` of a column to a populated table. On PostgreSQL the column is added bare, which is a
    catalog change when it is nullable or has a constant default, and then:

    - a unique column gets its index built ``CONCURRENTLY``, then made its UNIQUE constraint
      (``ADD CONSTRAINT ... UNIQUE USING INDEX``, a catalog change). Django's second index for
      ``LIKE`` queries (``..._like``, ``varchar_pattern_ops``) is not built: a unique column is looked
      up by equality, which the unique index serves;
    - a column with a CHECK (a positive integer's ``>= 0``) gets it ``NOT VALID``, which checks new
      rows only, then ``VALIDATE CONSTRAINT``, which reads the table under a lock that lets reads and
      writes through. A CHECK written on the column would have the table read under ``ACCESS
      EXCLUSIVE``.

    The constraints have the names a plain ``AddField`` gives them. Relations and ``db_index`` columns
    are not handled: no migration of the app adds one to a populated table.
    """

    # Elsewhere, SQLite copies the table into a new one for a unique or NOT NULL column: AddFieldOnce's one
    # transaction keeps the copy whole, which the non-atomic migration does not.
    def forwards_on_postgresql(self, model, schema_editor, from_state) -> None:
        field = model._meta.get_field(self.name)
        if field.remote_field or (field.db_index and not field.unique):
            raise NotImplementedError(f"{self.__class__.__name__} does not add relations or indexed columns.")
        table = model._meta.db_table
        column = field.column
        quote = schema_editor.quote_name

        if not column_exists(schema_editor, table, column):
            bare = copy.copy(field)
            bare._unique = False
            bare.db_check = lambda connection: None
            if not self.preserve_default:
                bare.default = self.field.default
            schema_editor.add_field(from_state.apps.get_model(model._meta.app_label, self.model_name), bare)

        if field.unique:
            _add_unique_concurrently(schema_editor, table, _constraint_name(schema_editor, table, column, "key"),
                                     [column])

        check = field.db_parameters(connection=schema_editor.connection)["check"]
        if check:
            name = _constraint_name(schema_editor, table, column, "check")
            if not _constraint_exists(schema_editor, table, name):
                schema_editor.execute(
                    f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} CHECK ({check}) NOT VALID"
                )
            schema_editor.execute(f"ALTER TABLE {quote(table)} VALIDATE CONSTRAINT {quote(name)}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            # DROP COLUMN is a catalog change, and takes the column's constraints and indexes along.
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        with transaction.atomic(using=schema_editor.connection.alias):
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def _made_an_index(constraint) -> bool:
    """Whether Django makes the constraint a unique index rather than a table's constraint: a unique
    constraint with a condition or with operator classes (read with getattr: django-stubs does not declare
    them)."""
    return isinstance(constraint, models.UniqueConstraint) and (
        constraint.condition is not None or bool(getattr(constraint, "opclasses", ())))


class AddConstraintConcurrentlyOnPostgreSQL(_ConcurrentlyOnPostgreSQL, AddConstraintOnce):
    """``AddConstraint`` of a ``UniqueConstraint`` that Django makes a unique index (one with a
    ``condition`` or with operator classes): built ``CONCURRENTLY`` on PostgreSQL, where a plain
    ``CREATE UNIQUE INDEX`` stops every write to the table while it reads the whole table. Elsewhere
    one with operator classes (which only PostgreSQL reads) is that index too, built alone: SQLite's
    schema editor would copy the whole table to add it."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = _model_to_migrate(self, app_label, schema_editor, to_state)
        if model is not None and _made_an_index(self.constraint) and not _on_postgresql(self, schema_editor):
            if not index_or_constraint_exists(schema_editor, model._meta.db_table, self.constraint.name):
                schema_editor.execute(self.constraint.create_sql(model, schema_editor))
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def forwards_on_postgresql(self, model, schema_editor, from_state) -> None:
        if not _made_an_index(self.constraint):
            raise NotImplementedError(f"{self.__class__.__name__} adds unique constraints made indexes only.")
        _drop_invalid_index(schema_editor, self.constraint.name)
        if _index_is(schema_editor, self.constraint.name, valid=True):
            return
        sql = str(self.constraint.create_sql(model, schema_editor))
        prefix = "CREATE UNIQUE INDEX "
        if not sql.startswith(prefix):
            raise NotImplementedError(f"Unexpected SQL for {self.constraint.name}: {sql}")
        schema_editor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {sql[len(prefix):]}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        if _on_postgresql(self, schema_editor):
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(self.constraint.name)}")
        elif _made_an_index(self.constraint):
            if index_or_constraint_exists(schema_editor, model._meta.db_table, self.constraint.name):
                schema_editor.execute(self.constraint.remove_sql(model, schema_editor))
        else:
            schema_editor.remove_constraint(model, self.constraint)


class RemoveUniqueConstraint(RemoveConstraintOnce):
    """``RemoveConstraint`` of a table's plain ``UniqueConstraint``, passed over when it is gone. On
    PostgreSQL dropping it is a catalog change (its index goes with it); backwards, its index is built
    ``CONCURRENTLY`` first and then made the constraint (``ADD CONSTRAINT ... UNIQUE USING INDEX``, a
    catalog change too). SQLite copies the table either way, as Django's operation does: a table's
    own constraint cannot be dropped there otherwise."""

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        if not _on_postgresql(self, schema_editor):
            if not index_or_constraint_exists(schema_editor, model._meta.db_table, self.name):
                super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        constraint = to_state.models[app_label, self.model_name_lower].get_constraint_by_name(self.name)
        _add_unique_concurrently(schema_editor, model._meta.db_table, self.name,
                                 [model._meta.get_field(field).column for field in constraint.fields])


class ReplaceCheckConstraint(Operation):
    """Replaces a ``CheckConstraint`` by another of the same name (a status added to the choices). On
    PostgreSQL the old one is dropped and the new one added ``NOT VALID`` in one ``ALTER TABLE`` (a
    catalog change), then ``VALIDATE CONSTRAINT`` reads the table under a lock that lets reads and writes
    through; run again after an interruption, it does the same, which ends in the same place. On other
    databases, Django's ``RemoveConstraint`` and ``AddConstraint`` in one transaction."""

    reduces_to_sql = False

    def __init__(self, model_name: str, constraint):
        self.model_name = model_name
        self.constraint = constraint

    def deconstruct(self):
        return self.__class__.__name__, [], {"model_name": self.model_name, "constraint": self.constraint}

    def state_forwards(self, app_label, state):
        state.remove_constraint(app_label, self.model_name.lower(), self.constraint.name)
        state.add_constraint(app_label, self.model_name.lower(), self.constraint)

    def _replace(self, app_label, schema_editor, from_state, to_state):
        old = from_state.models[app_label, self.model_name.lower()].get_constraint_by_name(self.constraint.name)
        new = to_state.models[app_label, self.model_name.lower()].get_constraint_by_name(self.constraint.name)
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        if not _on_postgresql(self, schema_editor):
            with transaction.atomic(using=schema_editor.connection.alias):
                schema_editor.remove_constraint(model, old)
                schema_editor.add_constraint(model, new)
            return
        quote = schema_editor.quote_name
        table, name = quote(model._meta.db_table), quote(new.name)
        check = new._get_check_sql(model, schema_editor)
        schema_editor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}, "
                              f"ADD CONSTRAINT {name} CHECK ({check}) NOT VALID")
        schema_editor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._replace(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        self._replace(app_label, schema_editor, from_state, to_state)

    def describe(self):
        return f"Replace the check constraint {self.constraint.name} of {self.model_name}"

    @property
    def migration_name_fragment(self):
        return f"replace_{self.constraint.name.lower()}"

