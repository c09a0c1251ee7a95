"""A hot statement's text with the values that stay the same from one call to the next written in.

On PostgreSQL Django binds parameters on the client: psycopg turns every one into a quoted literal
before each execution, about 4 µs a value. The statement that takes a lease has some fifty, nearly all
of them the same at every call (statuses, the workflow names and queues this process serves): written
in once per process, the statement keeps a handful of parameters.

On SQLite binding costs nothing, but a parameter compared with a column that a partial index's condition
names (``status = ?`` beside an index ``WHERE status = 'queued'``) makes SQLite prepare the statement
again at every run, as the value might change which index applies: for the take of a lease and a new
instance's INSERT, with the instance table's partial indexes, that was most of the statement's cost (a
create's INSERT 200 µs against 135 µs with its status written in). So the constant values are written in
on SQLite too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


class Varying:
    """A parameter that changes from one call to the next (a primary key, a time): left a parameter."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


# The texts written so far, by (alias, statement, its constant values). A process makes a few shapes.
_written: dict[tuple[str, str, tuple[Any, ...]], str] = {}
_MAX_WRITTEN = 256


def bind(connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any],
         constant: bool = True) -> tuple[str, list[Any]]:
    """``sql`` and its parameters as executed: on PostgreSQL and SQLite, unless told the other values vary
    too (``constant`` False), every value that is not ``Varying`` written into the text as a literal; the
    ``Varying`` values are the parameters left."""
    varying = [param.value for param in params if isinstance(param, Varying)]
    if connection.vendor not in ("postgresql", "sqlite") or not constant:
        return sql, [param.value if isinstance(param, Varying) else param for param in params]
    # A list (an array on PostgreSQL) is keyed by its items.
    constants = tuple(tuple(param) if isinstance(param, list) else param
                      for param in params if not isinstance(param, Varying))
    key = (connection.alias, sql, constants)
    text = _written.get(key)
    if text is None:
        pieces = sql.split("%s")
        if len(pieces) != len(params) + 1:
            raise ValueError(f"{len(params)} parameters for {len(pieces) - 1} placeholders")
        literal = _postgresql_literal(connection) if connection.vendor == "postgresql" else _sqlite_literal
        written = [pieces[0]]
        for param, piece in zip(params, pieces[1:]):
            # A literal's own % is doubled: the text still goes through the driver's formatting.
            written.append("%s" if isinstance(param, Varying) else literal(param).replace("%", "%%"))
            written.append(piece)
        text = "".join(written)
        if len(_written) >= _MAX_WRITTEN:
            _written.clear()
        _written[key] = text
    return text, varying


def _postgresql_literal(connection: BaseDatabaseWrapper) -> Callable[[Any], str]:
    ops: Any = connection.ops  # PostgreSQL's, which composes SQL with its driver
    return lambda value: str(ops.compose_sql("%s", [value]))


def _sqlite_literal(value: Any) -> str:
    """``value`` as an SQLite literal: the constants of the engine's statements are text, numbers, booleans
    and NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQLite literal for a constant of type {type(value).__name__}: pass it as Varying")
