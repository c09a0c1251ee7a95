"""Rows fetched with hand-written SQL, decoded as the ORM would decode the model's fields.

The replay's hot statements (taking the lease, loading the journal, writing
steps, releasing the lease) are written once as SQL rather than built by the
ORM on every call: building and compiling them cost more than running them.
Their rows still go through each field's own converters (JSON text, SQLite's
datetime strings), so they read back exactly what ``Model.objects`` would give.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db import models


class RowReader:
    """Decodes rows of ``columns`` of ``model`` fetched from one kind of database."""

    __slots__ = ("_converters",)

    def __init__(self, connection, model: type[models.Model], columns: Sequence[str]):
        self._converters: list[tuple[int, list[Callable], object]] = []
        for index, name in enumerate(columns):
            # Columns of the model's own table: concrete fields, never a reverse relation.
            field = cast("models.Field[Any, Any]", model._meta.get_field(name))
            expression = field.cached_col
            converters = connection.ops.get_db_converters(expression) + field.get_db_converters(connection)
            if converters:
                self._converters.append((index, converters, expression))

    def decode(self, row, connection) -> list:
        values = list(row)
        for index, converters, expression in self._converters:
            value = values[index]
            for converter in converters:
                value = converter(value, expression, connection)
            values[index] = value
        return values


_readers: dict[tuple, RowReader] = {}


def reader(connection, model: type[models.Model], columns: tuple[str, ...]) -> RowReader:
    """The reader of these columns on this kind of database, built once."""
    key = (connection.vendor, model, columns)
    found = _readers.get(key)
    if found is None:
        found = _readers[key] = RowReader(connection, model, columns)
    return found
