"""Migration operations that drop an index no query needs, found in the catalog rather than by name: a
``LIKE`` index beside a unique text column looked up by equality, and a foreign key's own index where
another index leads with its column. Each costs every write to its table. Like those of
``migration_operations``, they run on a live PostgreSQL database (``DROP INDEX CONCURRENTLY``, so a
migration that uses them must be ``atomic = False``) and run again finding nothing to do."""

from __future__ import annotations

from django.db.migrations.operations.base import Operation

from django_workflows.migration_operations import _drop_invalid_index, _model_to_migrate, _on_postgresql


class _OnAField(Operation):
    """An operation on the field ``name`` of the model ``model_name``."""

    def __init__(self, model_name: str, name: str):
        self.model_name = model_name
        self.name = name

    def deconstruct(self):
        return self.__class__.__name__, [], {"model_name": self.model_name, "name": self.name}


class DropLikeIndexOnPostgreSQL(_OnAField):
    """Drops the ``LIKE`` index (``varchar_pattern_ops``) that Django's PostgreSQL backend added beside a
    unique text column's constraint, with ``DROP INDEX CONCURRENTLY``. The index is found in the
    catalog, by its one column and its operator class, not by the name Django would give it today.

    Such an index serves no query when the column is only looked up by equality, and costs every
    write. Nothing on other databases, and nothing is rebuilt backwards."""

    def state_forwards(self, app_label, state):
        pass

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        if not _on_postgresql(self, schema_editor):
            return
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT quote_ident(namespace.nspname) || '.' || quote_ident(index.relname)
                FROM pg_index
                JOIN pg_class AS index ON index.oid = pg_index.indexrelid
                JOIN pg_namespace AS namespace ON namespace.oid = index.relnamespace
                JOIN pg_attribute AS attribute
                    ON attribute.attrelid = pg_index.indrelid AND attribute.attnum = pg_index.indkey[0]
                JOIN pg_opclass AS opclass ON opclass.oid = pg_index.indclass[0]
                WHERE pg_index.indrelid = to_regclass(%s) AND pg_index.indnatts = 1
                    AND attribute.attname = %s
                    AND opclass.opcname IN ('varchar_pattern_ops', 'text_pattern_ops')
                    AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = pg_index.indexrelid)
                """,
                [schema_editor.quote_name(model._meta.db_table), model._meta.get_field(self.name).column],
            )
            indexes = [name for (name,) in cursor.fetchall()]
        for index in indexes:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        pass

    def describe(self):
        return f"Drop the LIKE index of {self.model_name}.{self.name} on PostgreSQL"

    @property
    def migration_name_fragment(self):
        return f"drop_{self.model_name.lower()}_{self.name.lower()}_like_index"


class DropForeignKeyIndex(_OnAField):
    """Sets ``db_index=False`` on a foreign key whose column another index already leads with, and drops
    the index Django built for it: ``DROP INDEX CONCURRENTLY`` on PostgreSQL (a plain ``DROP INDEX`` takes
    an ``ACCESS EXCLUSIVE`` lock), a plain ``DROP INDEX`` elsewhere, where Django's ``AlterField`` would
    copy the whole table on SQLite to drop one index.

    The index is found in the catalog, as the one non-unique index on that column alone, not by its
    name; run again, it finds none. Backwards, it is built again (``CONCURRENTLY`` on PostgreSQL)."""

    def state_forwards(self, app_label, state):
        field = state.models[app_label, self.model_name.lower()].fields[self.name].clone()
        field.db_index = False
        state.alter_field(app_label, self.model_name.lower(), self.name, field, True)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        concurrently = " CONCURRENTLY" if _on_postgresql(self, schema_editor) else ""
        for index in _indexes_of_column_alone(schema_editor, model, model._meta.get_field(self.name).column):
            schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(index)}")

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if (model := _model_to_migrate(self, app_label, schema_editor, to_state)) is None:
            return
        field = model._meta.get_field(self.name)
        concurrently = _on_postgresql(self, schema_editor)
        if concurrently:
            _drop_invalid_index(schema_editor, schema_editor._create_index_name(model._meta.db_table, [field.column]))
        if schema_editor.collect_sql or not _indexes_of_column_alone(schema_editor, model, field.column):
            built = {"concurrently": True} if concurrently else {}
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field], **built))

    def describe(self):
        return f"Drop the index of the foreign key {self.model_name}.{self.name}"

    @property
    def migration_name_fragment(self):
        return f"drop_{self.model_name.lower()}_{self.name.lower()}_index"


def _indexes_of_column_alone(schema_editor, model, column: str) -> list[str]:
    """The names of the table's non-unique indexes on ``column`` alone and without a condition (a partial
    index serves its own rows only). ``sqlmigrate`` prints the statements for a database that has one."""
    table = model._meta.db_table
    if schema_editor.collect_sql:
        return [schema_editor._create_index_name(table, [column])]
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
        return [name for name, index in found.items()
                if index["index"] and not index["unique"] and not index["primary_key"]
                and index["columns"] == [column] and not _is_partial(cursor, table, name)]


def _is_partial(cursor, table: str, index: str) -> bool:
    if cursor.db.vendor == "postgresql":
        cursor.execute("SELECT indpred IS NOT NULL FROM pg_index WHERE indexrelid = to_regclass(%s)",
                       [cursor.db.ops.quote_name(index)])
    elif cursor.db.vendor == "sqlite":
        cursor.execute("SELECT partial FROM pragma_index_list(%s) WHERE name = %s", [table, index])
    else:
        return False
    row = cursor.fetchone()
    return bool(row and row[0])
