"""The cursor the engine's hot statements run on: prepared on PostgreSQL when the project asks psycopg for
it, and on SQLite with each statement's text converted once.

A step's journal row, the release that ends a replay, the take of a lease and a new instance's INSERT run
thousands of times a minute with the same text. Django binds parameters on the client on PostgreSQL
(psycopg's ``ClientCursor``), so the server parses and plans each one afresh: about a third of a journaled
step on PostgreSQL (benchmarks/REPORT.md). psycopg prepares a statement that a connection runs
``prepare_threshold`` times, but only on a cursor that binds on the server, and Django turns it off
(``prepare_threshold`` None) because a connection pooler in transaction mode (PgBouncer before 1.21)
loses a session's prepared statements.

So the project chooses, with Django's own option: a PostgreSQL database whose ``OPTIONS`` set
``prepare_threshold`` (5 is psycopg's default) runs these statements on a cursor that binds on the server,
and ``first_row`` and ``all_rows`` prepare each once on a connection, once it has run that many times
there, and run it by name (``named_statements``); Django's own queries stay on its cursor, which never prepares. Without the
option nothing changes. The cursor is still Django's wrapper: its errors and ``execute_wrapper`` hooks
are as for any other. Where Django logs queries (``DEBUG``, a test's ``CaptureQueriesContext``), the
statements stay on Django's cursor, so that ``connection.queries`` shows each with its values as it shows
every other.

On SQLite, Django's cursor turns every statement's ``%s`` into the driver's ``?`` with a regular
expression at every run: a tenth of a journaled step's Python. The engine's cursor keeps each text it has
converted, so that its few statements, run thousands of times, are converted once.

``first_row`` and ``all_rows`` run a hot statement and fetch what it returns. Through Django's wrapper that
is a chain of calls (the execute wrappers, each as a partial, the error wrapper around the fetch too):
about 4 µs a statement, 5 % of a journaled step on SQLite. Where nothing would see the difference they call the
driver's cursor under the wrapper directly, with Django's two checks kept (a transaction broken by an
error refuses the statement, and the driver's errors become Django's). Nothing would see it when the
wrapper is Django's plain one (not the one that logs queries: ``DEBUG``, a test's
``CaptureQueriesContext``), its ``execute`` is Django's own (an error tracker may replace it to record
queries), and every execute wrapper of the connection is one that does nothing now
(``passes_by_while_empty``): any other, a project's or a test's, sees every statement as before.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence, Sized
from typing import TYPE_CHECKING, Any

from django.db.backends.utils import CursorWrapper

from django_workflows.store import named_statements

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


def prepares(connection: BaseDatabaseWrapper) -> bool:
    """Whether the statements run through ``cursor`` now are prepared after ``prepare_threshold`` runs."""
    return (connection.vendor == "postgresql" and not connection.queries_logged
            and connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold") is not None)


# Django's own execute, as this module first sees it: a replacement made since (an error tracker's, to record
# queries) is not, and neither is one made before.
_DJANGOS_EXECUTE = CursorWrapper.execute if CursorWrapper.execute.__module__ == "django.db.backends.utils" else None

# The execute wrappers that pass every statement through untouched while a collection of theirs is empty.
_PASSING_BY: dict[Any, Sized] = {}


def passes_by_while_empty(wrapper: Any, active: Sized) -> None:
    """Note an execute wrapper that passes every statement through untouched while ``active`` is empty:
    ``first_row`` and ``all_rows`` may then skip it."""
    _PASSING_BY[wrapper] = active


def first_row(cursor: CursorWrapper, sql: str, params: Sequence[Any]) -> Any:
    """``cursor.execute(sql, params)``, then its first row (None if it returned none)."""
    return _run(cursor, sql, params, "fetchone")


def all_rows(cursor: CursorWrapper, sql: str, params: Sequence[Any]) -> Any:
    """``cursor.execute(sql, params)``, then all its rows (a list)."""
    return _run(cursor, sql, params, "fetchall")


def _run(cursor: CursorWrapper, sql: str, params: Sequence[Any], fetch: str) -> Any:
    driver = _driver_cursor(cursor)
    if driver is None:
        cursor.execute(sql, params)
        return getattr(cursor, fetch)()
    db = cursor.db
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        if type(driver) is _NAMED_ON:
            rows = named_statements.run(db, sql, params, fetch)
            if rows is not named_statements.NOT_RUN:
                return rows
        driver.execute(sql, params)
        return getattr(driver, fetch)()


def _driver_cursor(cursor: CursorWrapper) -> Any:
    """The driver's cursor under ``cursor``, where calling it directly passes by nothing; else None."""
    if type(cursor) is not CursorWrapper or CursorWrapper.execute is not _DJANGOS_EXECUTE:
        return None
    for wrapper in cursor.db.execute_wrappers:
        active = _PASSING_BY.get(wrapper)
        if active is None or active:
            return None
    return cursor.cursor


def cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor of ``connection`` (Django's, with its checks and wrappers) for the engine's hot statements:
    binding on the server, its statements run by name where ``prepares``; converting each text once on
    SQLite; else ``connection.cursor()``."""
    if "cursor" not in vars(connection) and not connection.queries_logged:
        # Django's own cursor() with its checks, opening the driver's cursor of the engine's kind at once
        # instead of a plain one that would be closed again: that plain cursor and its checks of
        # asyncio and the environment were half the cost of a cursor. Not where something replaced
        # this connection's cursor() (a debugging toolbar's, which sees every cursor).
        connection.close_if_health_check_failed()
        connection.ensure_connection()  # which refuses to run in an event loop, as cursor() does
        with connection.wrap_database_errors:
            driver = _engine_driver_cursor(connection)
            if driver is not None:
                connection.validate_thread_sharing()
                return connection.make_cursor(driver)
    wrapper = connection.cursor()
    driver = _engine_driver_cursor(connection)
    if driver is not None:
        wrapper.cursor.close()
        wrapper.cursor = driver
    return wrapper


def _engine_driver_cursor(connection: BaseDatabaseWrapper) -> Any:
    """The driver's cursor ``cursor`` gives the engine on ``connection``, opened; None where it is
    Django's own."""
    if prepares(connection):
        _psycopg()
        return _NAMED_ON(connection.connection)
    if connection.vendor == "sqlite":
        return connection.connection.cursor(factory=_converting_once())
    return None


class _NoCursor:
    pass


# The cursor class ``cursor`` opens on PostgreSQL (psycopg's own, binding on the server), once psycopg is
# imported; until then no cursor is of it. Django's cursors are subclasses of psycopg's, never it.
_NAMED_ON: type = _NoCursor


@functools.cache
def _psycopg() -> Any:
    global _NAMED_ON
    import psycopg

    _NAMED_ON = psycopg.Cursor
    return psycopg


_CONVERTED_TEXTS = 1024
"""The most statement texts kept converted: the engine's are a few dozen (a journal write of n rows is a
text of its own for each n up to the batch's size)."""


@functools.cache
def _converting_once() -> Any:
    import sqlite3

    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    _bind_as_text()

    texts: dict[str, str] = {}
    run = sqlite3.Cursor.execute

    class ConvertingOnce(SQLiteCursorWrapper):
        """Django's SQLite cursor, its conversion of a statement's placeholders kept for the next run."""

        def execute(self, query: str, params: Any = None) -> Any:
            # The engine's statements pass their parameters as a list: Django's execute would first ask
            # whether they are a Mapping (an ABC's isinstance, dearer than the rest of the call).
            if type(params) is list:
                return run(self, self.convert_query(query), params)
            return super().execute(query, params)

        def convert_query(self, query: str, *, param_names: list[str] | None = None) -> str:
            if param_names is not None:
                return super().convert_query(query, param_names=param_names)
            converted = texts.get(query)
            if converted is None:
                if len(texts) >= _CONVERTED_TEXTS:
                    texts.clear()
                converted = texts[query] = super().convert_query(query)
            return converted

    return ConvertingOnce


def _bind_as_text() -> None:
    """Have sqlite3 bind the engine's str subclasses (a status, a step's kind, JSON the engine encoded
    already) as the text they are, through a registered adapter.

    sqlite3 binds a plain str, int or float at once, but for any other type it first looks for an adapter:
    in its registry, then as two attributes (the protocol's ``__adapt__``, the value's ``__conform__``),
    each lookup raising an AttributeError and dropping it. A journaled step's row binds four such values;
    those failed lookups cost more than the rest of binding its parameters. A registered adapter is found
    in the registry first. The text bound is the same (``str.__str__`` gives the string a subclass holds:
    a choice's value), so this changes nothing but the time, for the engine's statements and the ORM's."""
    import sqlite3

    from django_workflows.foundations.statuses import InstanceStatus, ParentEndPolicy, StepKind, StepStatus
    from django_workflows.store.journal_values import Encoded

    for text_type in (Encoded, InstanceStatus, ParentEndPolicy, StepKind, StepStatus):
        sqlite3.register_adapter(text_type, str.__str__)
