"""The engine's hot statements on PostgreSQL, prepared once per connection under a name of the engine's
and run through libpq's own calls.

``prepared.cursor`` gives the engine a psycopg cursor that binds on the server, so that psycopg prepares
its statements. Each run still goes through that cursor's machinery: the query converted and looked up,
the prepared statement found by a key of the text and every parameter's type, the results set on the
cursor and read back from it, about 90,000 instructions for a journal row. The statements are few and
always the same, so here each is prepared once on a connection under a name (``_dw_`` and a number,
apart from psycopg's own ``_pg3_`` names) and run by that name: the parameters dumped by the
connection's own adapters (those the cursor would use), sent, and waited for by psycopg's ``wait``, as
the cursor does, which cancels the statement on an interrupt. A third of the instructions.

Only where the statement's transaction is what it would be on the cursor: the connection in autocommit
with no transaction open (the statement commits by itself), or inside a transaction already begun.
Where psycopg would first send a BEGIN (out of autocommit, none begun yet), the cursor runs it. An
error of the server is raised as the cursor raises it (psycopg's error for its SQLSTATE), and Django's
wrapper around the call turns it into Django's, as for any statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

NOT_RUN = object()
"""What ``run`` returns for a statement it leaves to the cursor."""

_MOST_NAMES = 256
"""The most statements kept named on one connection: the engine's are a few dozen shapes (a journal write
of n rows is one of its own for each n, a release one for each set of columns it sets). Past it, the one
named first is deallocated to make room, as psycopg's own cache does past its ``prepared_max``."""

_MOST_TEXTS = 1024
"""The most statement texts kept numbered (``$1``...), forgotten all at once past it."""

# The SQLSTATE of a statement name the server does not know (invalid_sql_statement_name).
_NOT_PREPARED = b"26000"

# Only a plain ``%s`` is a placeholder here; a text with any other ``%`` is left to the cursor.
_PLACEHOLDER = re.compile(r"%s")


class _Named:
    """The statements named on one psycopg connection."""

    __slots__ = ("driver", "names", "numbered", "transformer", "encoding", "auto", "runs_alone", "runs_within",
                 "fatal", "sqlstate", "prepared", "rows", "execute", "issued")

    def __init__(self, driver: Any) -> None:
        from psycopg import generators, pq
        from psycopg.adapt import PyFormat, Transformer

        self.driver = driver
        self.names: dict[tuple[str, Any], bytes] = {}
        self.numbered: dict[str, bytes | None] = {}
        # The connection's adapters, as its cursors dump and load with them.
        self.transformer = Transformer(driver)
        self.encoding = driver.info.encoding
        self.auto = PyFormat.AUTO
        self.runs_alone, self.runs_within = pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS
        self.fatal, self.sqlstate = pq.ExecStatus.FATAL_ERROR, pq.DiagnosticField.SQLSTATE
        self.prepared, self.rows = pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK
        self.execute = generators.execute  # sends what is queued and reads the results, as a cursor does
        # The names given so far: a name is never given twice on a connection, whatever was dropped.
        self.issued = 0


def run(db: BaseDatabaseWrapper, sql: str, params: Sequence[Any], fetch: str) -> Any:
    """Run ``sql`` with ``params`` on ``db``'s psycopg connection by its name, preparing it the first time;
    return what the cursor's ``fetch`` ("fetchone" or "fetchall") would. ``NOT_RUN`` where the cursor
    must run it."""
    driver = db.connection
    named = db.__dict__.get("_workflows_named")
    if named is None or named.driver is not driver:
        named = db.__dict__["_workflows_named"] = _Named(driver)
    pgconn = driver.pgconn
    status = pgconn.transaction_status
    if not (status == named.runs_within or (status == named.runs_alone and driver.autocommit)):
        return NOT_RUN
    numbered = named.numbered.get(sql, NOT_RUN)
    if numbered is NOT_RUN:
        if len(named.numbered) >= _MOST_TEXTS:
            named.numbered.clear()
        numbered = named.numbered[sql] = _numbered(sql, named.encoding)
    if numbered is None:
        return NOT_RUN
    transformer = named.transformer
    with driver.lock:
        values = transformer.dump_sequence(params, [named.auto] * len(params))
        key = (sql, transformer.types)
        for _ in range(2):
            name = named.names.get(key)
            if name is None:
                if len(named.names) >= _MOST_NAMES:
                    _deallocate_first(named)
                name = f"_dw_{named.issued}".encode()
                named.issued += 1
                pgconn.send_prepare(name, numbered, param_types=transformer.types)
                _check(named, _results(named), prepared=True)
                named.names[key] = name
            pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
            result = _results(named)[-1]
            if result.status != named.fatal or result.error_field(named.sqlstate) != _NOT_PREPARED:
                break
            # Dropped on the server meanwhile (a DEALLOCATE ALL or DISCARD ALL run on this connection):
            # each is prepared again at its next run. Run alone, this one did not run, and runs now; in a
            # transaction, the error has failed it.
            named.names.clear()
            if status != named.runs_alone:
                break
        result = _check(named, [result], prepared=False)
    transformer.set_pgresult(result)
    if fetch == "fetchone":
        return transformer.load_row(0, tuple) if result.ntuples else None
    return transformer.load_rows(0, result.ntuples, tuple)


def _deallocate_first(named: _Named) -> None:
    """Deallocate the statement named first of those kept on ``named``'s connection, and forget it."""
    first = next(iter(named.names))
    name = named.names.pop(first)
    named.driver.pgconn.send_query(b"DEALLOCATE " + name)
    _check(named, _results(named), prepared=True)


def _results(named: _Named) -> Any:
    driver = named.driver
    return driver.wait(named.execute(driver.pgconn))


def _check(named: _Named, results: list[Any], prepared: bool) -> Any:
    """The last of ``results``, which must be a statement prepared (``prepared``) or rows returned; else the
    error the cursor would raise."""
    result = results[-1]
    status = result.status
    if status == (named.prepared if prepared else named.rows):
        return result
    import psycopg
    from psycopg import errors

    if status == named.prepared:
        raise psycopg.ProgrammingError("the last operation didn't produce records")
    raise errors.error_from_result(result, encoding=named.encoding)


def _numbered(sql: str, encoding: str) -> bytes | None:
    """``sql`` with its ``%s`` numbered as PostgreSQL's ``$1``, ``$2``..., encoded; None if it has any other
    ``%``."""
    if sql.count("%") != sql.count("%s"):
        return None
    numbers = iter(range(1, sql.count("%s") + 1))
    return _PLACEHOLDER.sub(lambda _: f"${next(numbers)}", sql).encode(encoding)
