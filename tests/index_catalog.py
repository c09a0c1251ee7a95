"""What the database's catalog says of a table's indexes, read the same way on SQLite and PostgreSQL."""

from django.db import connection, transaction


def full_indexes(table: str) -> dict[str, tuple[tuple[str, ...], bool]]:
    """The table's indexes that every row is written to (not partial, not the primary key): their
    columns, and whether they are unique."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
        indexes = {}
        for name, index in found.items():
            if not (index["index"] or index["unique"]) or index["primary_key"]:
                continue
            if connection.vendor == "postgresql":
                cursor.execute("SELECT indpred IS NOT NULL FROM pg_index WHERE indexrelid = to_regclass(%s)",
                               [connection.ops.quote_name(name)])
            else:
                cursor.execute("SELECT partial FROM pragma_index_list(%s) WHERE name = %s", [table, name])
            partial = cursor.fetchone()  # None for SQLite's table constraints, never partial
            if not (partial and partial[0]):
                indexes[name] = (tuple(index["columns"]), index["unique"])
    return indexes


def index_definition(name: str) -> str:
    """An index's definition as the catalog keeps it: ``CREATE [UNIQUE] INDEX … [WHERE …]``."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s", [name])
        (definition,) = cursor.fetchone()
    return definition


def query_plan(query, params=None) -> str:
    """The plan the database chooses for a queryset, or for a statement's text with its ``params``, in a
    transaction of its own: on PostgreSQL with the sequential scan forbidden, since a test's table is tiny
    and the question is which index the query can use."""
    sql, params = (query, params) if isinstance(query, str) else query.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row) for row in cursor.fetchall())
