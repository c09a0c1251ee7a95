"""What the database's catalog says of a table's indexes, read the same way on SQLite and PostgreSQL."""

from django.db import connection


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
