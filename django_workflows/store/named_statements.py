"""The engine's hot statements on PostgreSQL, prepared once per connection under a name of the engine's
and run through libpq's own calls.

``prepared.cursor`` gives the engine a psycopg cursor that binds on the server, so that psycopg prepares
its statements. Each run still goes through that cursor's machinery: the query converted and looked up,
the prepared statement found by a key of the text and every parameter's type, the results set on the
cursor and read back from it, about 90,000 instructions for a journal row. The statements are few and
always the same, so here each is prepared once on a connection under a name (``_dw_`` and a number,
apart from psycopg's own ``_pg3_`` names) once it has run ``prepare_threshold`` times there, as psycopg
would prepare it, and run by that name: the parameters dumped by the connection's own adapters (those
the cursor would use), sent, and waited for by psycopg's ``wait``, as the cursor does, which cancels the
statement on an interrupt. A third of the instructions. Until then it is sent unnamed, parsed and
planned at each run, as the cursor sends a statement it has not prepared.

Only for a statement that runs alone, committing by itself: the connection in autocommit with no
transaction open, as the engine's statements between steps are. In a transaction the cursor runs it, as
before: psycopg deallocates every statement prepared on its connection at a rollback once it has
prepared one of its own, and a statement run alone whose name was dropped so is simply prepared again
and run (it did not run); one in a transaction would have failed the transaction. An error of the server
is raised as the cursor raises it (psycopg's error for its SQLSTATE), and Django's wrapper around the
call turns it into Django's, as for any statement.
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

    __slots__ = ("driver", "names", "numbered", "transformer", "encoding", "auto", "runs_alone",
                 "fatal", "sqlstate", "prepared", "rows", "execute", "issued", "runs", "threshold")

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
        self.runs_alone = pq.TransactionStatus.IDLE
        self.fatal, self.sqlstate = pq.ExecStatus.FATAL_ERROR, pq.DiagnosticField.SQLSTATE
        self.prepared, self.rows = pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK
        self.execute = generators.execute  # sends what is queued and reads the results, as a cursor does
        # The names given so far: a name is never given twice on a connection, whatever was dropped.
        self.issued = 0
        # The runs of each statement not named yet, and how many make it worth naming (the connection's).
        self.runs: dict[tuple[str, Any], int] = {}
        self.threshold = driver.prepare_threshold if driver.prepare_threshold is not None else 0


def run(db: BaseDatabaseWrapper, sql: str, params: Sequence[Any], fetch: str) -> Any:
    """Run ``sql`` with ``params`` alone on ``db``'s psycopg connection, by its name once it has run
    ``prepare_threshold`` times there (unnamed until then); return what the cursor's ``fetch``
    ("fetchone" or "fetchall") would. ``NOT_RUN`` where the cursor must run it: in a transaction."""
    driver = db.connection
    named = db.__dict__.get("_workflows_named")
    if named is None or named.driver is not driver:
        named = db.__dict__["_workflows_named"] = _Named(driver)
    pgconn = driver.pgconn
    if not driver.autocommit or pgconn.transaction_status != named.runs_alone:
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
                # Prepared once run ``prepare_threshold`` times on the connection, as psycopg does: a text
                # run once or twice (a batch of an unusual size) is not worth a statement kept on the server.
                runs = named.runs.get(key, 0)
                if runs < named.threshold:
                    if len(named.runs) >= _MOST_TEXTS:
                        named.runs.clear()
                    named.runs[key] = runs + 1
                    pgconn.send_query_params(numbered, values, param_formats=transformer.formats,
                                             param_types=transformer.types)
                    result = _results(named)[-1]
                    break
                named.runs.pop(key, None)
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
            # Dropped on the server meanwhile: psycopg deallocates every statement of its connection at a
            # rollback once it has prepared one of its own, and a pooler's reset (DISCARD ALL) does too.
            # Each is prepared again at its next run; this one, run alone, did not run, and runs now.
            named.names.clear()
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
