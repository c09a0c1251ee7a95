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

_MOST_NAMES = 128
"""The most statements named on one connection: the engine's are a few dozen shapes (a journal write of n
rows is one of its own for each n). Past it, new ones go through the cursor, which prepares as psycopg
does."""

# The SQLSTATE of a statement name the server does not know (invalid_sql_statement_name).
_NOT_PREPARED = b"26000"

# Only a plain ``%s`` is a placeholder here; a text with any other ``%`` is left to the cursor.
_PLACEHOLDER = re.compile(r"%s")


class _Named:
    """The statements named on one psycopg connection."""

    __slots__ = ("driver", "names", "numbered", "transformer", "encoding", "auto", "runs_alone", "runs_within",
                 "fatal", "sqlstate")

    def __init__(self, driver: Any) -> None:
        from psycopg import pq
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
        numbered = named.numbered[sql] = _numbered(sql, named.encoding) if len(named.numbered) < _MOST_NAMES else None
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
                    return NOT_RUN
                name = f"_dw_{len(named.names)}".encode()
                pgconn.send_prepare(name, numbered, param_types=transformer.types)
                _check(named, _results(driver), prepared=True)
                named.names[key] = name
            pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
            result = _results(driver)[-1]
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


def _results(driver: Any) -> Any:
    from psycopg import generators

    return driver.wait(generators.execute(driver.pgconn))


def _check(named: _Named, results: list[Any], prepared: bool) -> Any:
    """The last of ``results``, which must be a statement prepared (``prepared``) or rows returned; else the
    error the cursor would raise."""
    import psycopg
    from psycopg import errors, pq

    result = results[-1]
    status = result.status
    if status == (pq.ExecStatus.COMMAND_OK if prepared else pq.ExecStatus.TUPLES_OK):
        return result
    if status == pq.ExecStatus.COMMAND_OK:
        raise psycopg.ProgrammingError("the last operation didn't produce records")
    raise errors.error_from_result(result, encoding=named.encoding)


def _numbered(sql: str, encoding: str) -> bytes | None:
    """``sql`` with its ``%s`` numbered as PostgreSQL's ``$1``, ``$2``..., encoded; None if it has any other
    ``%``."""
    if sql.count("%") != sql.count("%s"):
        return None
    numbers = iter(range(1, sql.count("%s") + 1))
    return _PLACEHOLDER.sub(lambda _: f"${next(numbers)}", sql).encode(encoding)
