"""The query lookups of the package's own, for the fields of its models (registered by ``models``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import EmptyResultSet
from django.db import NotSupportedError
from django.db.models import Lookup

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler

_SQL = tuple[str, tuple[Any, ...]]


class HoldsAnyOf(Lookup):
    """``waiting_for__holds_any_of=[...]``: the stored list holds one of these strings, or more.

    Django's ``contains`` on a JSONField does not run on SQLite, and its ``has_any_keys`` reads object
    keys there, not list items, so each database gets its own SQL.
    """

    lookup_name = "holds_any_of"
    prepare_rhs = False  # the strings are compared with the list's items, not stored as JSON

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _SQL:
        raise NotSupportedError(
            f"holds_any_of is written for SQLite and PostgreSQL, not {connection.vendor}."
        )

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _SQL:
        if not self.rhs:
            raise EmptyResultSet  # no type to hold: matches nothing, as on PostgreSQL
        column, params = compiler.compile(self.lhs)
        marks = ", ".join(["%s"] * len(self.rhs))
        sql = f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value IN ({marks}))"
        return sql, (*params, *self.rhs)

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _SQL:
        column, params = compiler.compile(self.lhs)
        return f"{column} ?| %s", (*params, list(self.rhs))
