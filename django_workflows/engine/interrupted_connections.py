"""The connections of an attempt its timeout interrupted: which transactions are the caller's (kept), and
how every other connection of the thread is thrown away, whatever state the interruption left it in.

An interruption can land anywhere in the attempt's code, halfway through a database call too: a connection
it used may be mid-transaction, mid-exchange with the server, or holding locks. The next statement on the
thread (the journal's row of the failed attempt) must never meet one of those, so each is rolled back
where that cannot hang, closed and forgotten by Django; the next statement opens a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

if TYPE_CHECKING:
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper


def callers_transactions(journal: BaseDatabaseWrapper | None = None) -> tuple[BaseDatabaseWrapper, ...]:
    """The thread's connections inside an atomic block: the transactions of whoever called the replay.

    Asked before every attempt. With one database configured, the replay's journal connection is
    the only one there is, and reading its flag spares a walk through Django's per-thread registry
    of connections, which costs more than the rest of watching the attempt.
    """
    if journal is not None and len(connections.settings) == 1:
        return (journal,) if journal.in_atomic_block else ()
    return tuple(wrapper for wrapper in connections.all(initialized_only=True) if wrapper.in_atomic_block)


def discard_connections(keep: tuple[BaseDatabaseWrapper, ...] = ()) -> None:
    """End every connection of this thread that interrupted code may have left in any state, except
    those in ``keep``; the next statement on each opens a new one. Never raises: the connection is
    thrown away precisely because nothing about it can be relied on."""
    for wrapper in connections.all(initialized_only=True):
        if not any(wrapper is kept for kept in keep):
            discard(wrapper)


def discard(wrapper: BaseDatabaseWrapper) -> None:
    """Roll back and close one connection, whatever state it is in, and make Django forget it."""
    raw = wrapper.connection
    if raw is not None:
        # Roll back first where that cannot hang on the interrupted exchange: the locks are released
        # now, not when the server notices the closed socket.
        try:
            _roll_back(wrapper.vendor, raw)
        except Exception:
            pass
        if wrapper.vendor != "sqlite" or not cast("SQLiteDatabaseWrapper", wrapper).is_in_memory_db():
            try:
                raw.close()
            except Exception:
                pass
            pool = getattr(raw, "_pool", None)
            if pool is not None:
                # A connection of Django's PostgreSQL pool counts as lent until it is given back: the
                # pool sees it is closed and replaces it.
                try:
                    pool.putconn(raw)
                except Exception:
                    pass
            raw = wrapper.connection = None
    # Django's record of the interrupted code's transaction, reset as for a connection never opened;
    # connect() resets the rest. Callbacks registered with on_commit() go: their work was rolled back.
    wrapper.in_atomic_block = False
    wrapper.savepoint_ids = []
    wrapper.atomic_blocks = []
    wrapper.savepoint_state = 0
    wrapper.commit_on_exit = True
    wrapper.needs_rollback = False
    # Set by Django's BaseDatabaseWrapper, which django-stubs leave it out of.
    wrapper.rollback_exc = None  # type: ignore[attr-defined]
    wrapper.closed_in_transaction = False
    wrapper.run_on_commit = []
    wrapper.run_commit_hooks_on_set_autocommit_on = False
    if raw is not None:
        # An in-memory SQLite database lives only as long as its connection: it was rolled back and
        # is kept, in autocommit as a new connection would be.
        try:
            wrapper.set_autocommit(wrapper.settings_dict["AUTOCOMMIT"])
        except Exception:
            pass


def _roll_back(vendor: str, raw: Any) -> None:
    # ``raw``: the driver's connection (sqlite3's, psycopg's), which Django's wrapper holds untyped.
    if vendor == "sqlite":
        if raw.in_transaction:
            raw.rollback()
        return
    pgconn = getattr(raw, "pgconn", None)  # psycopg 3; with psycopg 2, closing is the rollback
    if vendor != "postgresql" or pgconn is None or raw.closed:
        return
    from psycopg import pq

    if pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
        # Interrupted between sending a statement and reading its result: cancel it rather than wait
        # for it, and read what is left, so the connection can take the ROLLBACK.
        # (A bounded read: a COPY left halfway keeps returning results of its own.)
        raw.cancel()
        for _ in range(100):
            if pgconn.get_result() is None:
                break
    if pgconn.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        pgconn.exec_(b"ROLLBACK")
