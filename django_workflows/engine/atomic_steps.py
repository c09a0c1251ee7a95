"""Exactly-once steps for the project's own database: ``step.do(name, fn, atomic=True)``.

A step's side effects run at least once: a worker that dies after the body and before its journal row
commits runs the body again. When the body writes only to the workflow's database (create an order,
mark an invoice paid), ``atomic=True`` makes that exactly once. The body runs inside
``transaction.atomic()`` on that database, and its journal row is written in the same transaction,
fenced by the instance's epoch, before it commits:

- a worker that dies before the commit leaves neither the body's writes nor the row, and the next
  replay runs the body again, from scratch;
- a worker whose lease was lost meanwhile (the instance terminated, restarted or taken over) fails the
  fence, and the whole transaction rolls back: the writes never happen twice. On PostgreSQL the fence
  holds the instance's row ``FOR SHARE`` until the commit, so a terminate waits for it;
- a failed attempt rolls its writes back; the retry runs the transaction again from scratch, and the
  failure is journaled after, as any step's.

What it cannot cover is refused: a body that queries another database alias errors the instance (its
writes there would commit on their own), and so does an ``async def`` body (its event loop refuses
synchronous database calls). Calls to the outside world from such a step (an HTTP request, an email)
are still at least once. Side by side (``step.all``, ``asyncio.gather``), an atomic step does not run in
a thread of its own: its attempts run in the replay's thread, whose connection its transaction is.

What it cannot cover and cannot be sure of is reported: Django gives each thread a connection of its own,
so a write made from another thread (one the body started, a pool it submits to) is outside the step's
transaction. It commits on its own (on SQLite it waits for the step's transaction first, which holds the
one write lock) and is made again by every retry. Which thread made a write cannot be told from the
write, and a process may have threads of its own writing meanwhile (a web server's other requests under
the inline executor), so it is not refused: a write to the step's database from a thread other than
the replays' and the engine's, while an atomic body runs, is logged as a warning naming the step
(``_Watch``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_workflows.shared import clock
from django_workflows.foundations.control_flow import StoreError
from django_workflows.errors import WorkflowConfigError
from django_workflows.engine.step_host import Attempt, PendingDo, StepHost
from django_workflows.store import prepared
from django_workflows.store.lease_keeper import keeper
from django_workflows.engine.interrupted_connections import callers_transactions


# A connection's execute wrapper (``execute_wrapper``), and the call it wraps: ``(sql, params, many,
# context)``.
Execute = Callable[[str, Any, bool, dict[str, Any]], Any]
ExecuteWrapper = Callable[[Execute, str, Any, bool, dict[str, Any]], Any]


class _RollBack(Exception):
    """The attempt failed: its transaction rolls back, and the failure is journaled after it."""


def attempt_and_journal(steps: StepHost, attempt: Callable[..., Attempt], pending: PendingDo, number: int,
                        journal_success: Callable[[Attempt], str]) -> tuple[Attempt, str | None]:
    """Run attempt ``number`` of an atomic step (with ``attempt``, ``DoSteps.attempt``) and, if it
    succeeds, journal it with
    ``journal_success(attempt) -> instance status``, in one transaction: ``(attempt, instance status)``,
    the status None when the attempt failed (nothing of it was committed; the caller journals the
    failure)."""
    writer = steps.writer
    alias = writer.alias
    if inspect.iscoroutinefunction(pending.fn):
        steps.fail_fatally(WorkflowConfigError(
            f"Step {pending.name!r} is atomic=True with an async def body: its event loop refuses the "
            "synchronous database calls the step's transaction is made of. Write the body as a def.",
            step=pending.key,
        ))
    # Asked before the step's own transaction opens: an interrupted attempt ends that one with the rest.
    callers = callers_transactions(writer.connection)
    outcome: Attempt | None = None
    try:
        with transaction.atomic(using=alias):
            with _only_on(alias, steps, pending), _watching(alias, steps, pending, number):
                outcome = attempt(pending, number, writer.connection, callers)
            if outcome.failure is None and connections[alias].needs_rollback:
                outcome = outcome._replace(text=None, value=None, failure=DatabaseError(
                    f"Step {pending.name!r} caught a database error inside its transaction and went on; "
                    "nothing it wrote can be committed. Give the statement that may fail an atomic block "
                    "of its own (with transaction.atomic(): ...), or let the error fail the attempt."
                ))
            if outcome.failure is not None or steps.fatal is not None:
                raise _RollBack()
            status = journal_success(outcome)
    except _RollBack:
        assert outcome is not None  # rolled back after the attempt
        return outcome, None
    except IntegrityError as exc:
        # At the commit, a deferred constraint the body's writes broke (Django's foreign keys are
        # deferred): the body's failure, rolled back with its row.
        assert outcome is not None  # the commit came after the attempt
        return outcome._replace(ended=clock.now(), text=None, value=None, failure=exc), None
    except DatabaseError as exc:
        # The commit's outcome is unknown (the connection dropped): the next replay reads the journal,
        # which has the row if and only if the body's writes committed.
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc
    return outcome, status


@contextmanager
def _only_on(alias: str, steps: StepHost, pending: PendingDo) -> Iterator[None]:
    """Refuse, for the attempt, every query on a database other than ``alias``."""
    with ExitStack() as stack:
        for other in connections:
            if other != alias:
                stack.enter_context(connections[other].execute_wrapper(_refusal(alias, other, steps, pending)))
        yield


def _refusal(alias: str, other: str, steps: StepHost, pending: PendingDo) -> ExecuteWrapper:
    def refuse(execute: Execute, sql: str, params: Any, many: bool, context: dict[str, Any]) -> NoReturn:
        steps.fail_fatally(WorkflowConfigError(
            f"Step {pending.name!r} is atomic=True: its body and its journal row commit in one transaction "
            f"of database {alias!r}, and it queried database {other!r}, whose writes would commit on their "
            f"own. Keep an atomic step's queries on {alias!r}, or drop atomic=True (the step is then at "
            "least once).",
            step=pending.key,
        ))

    return refuse


# -- writes from other threads -------------------------------------------------------------------------

# Statements that write nothing, by their first word: any other statement is taken for a write. Django
# sends a BEGIN of its own only for SQLite's IMMEDIATE or EXCLUSIVE transactions, which take the write
# lock: a write, which on SQLite waits for the atomic step's transaction to end.
_READS = frozenset({"SELECT", "SHOW", "EXPLAIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT", "SET",
                    "PRAGMA", "VALUES"})
# Threads of the engine's own, by the beginning of their names: the lease keeper, the timeout watchdog, the
# threads of step.all (their bodies are other steps'), the tasks executor's replays, the worker's purge.
_ENGINE_THREADS = ("django-workflows-", "workflows-")


class _Watch:
    """An atomic body running in this process: the database its transaction is on, and the threads that
    wrote to that database on connections of their own meanwhile (name: the first statement)."""

    __slots__ = ("alias", "writers")

    def __init__(self, alias: str):
        self.alias = alias
        self.writers: dict[str, str] = {}


# By the thread that runs each body. Read by every statement of the process (``observe``): empty but while
# an atomic body runs.
_running: dict[int, _Watch] = {}


def observe(execute: Execute, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """The execute wrapper of every connection of the process (``watch_connection``): a write on the
    database of a running atomic body, from another thread, is noted in the body's ``_Watch``."""
    if _running:
        _note(context["connection"], sql)
    return execute(sql, params, many, context)


# Nothing to note while no atomic body runs: the engine's hot statements may skip it then.
prepared.passes_by_while_empty(observe, _running)


def watch_connection(sender: object, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """``connection_created``: observe the new connection's statements. Every connection of the process
    connects before its first statement, in whichever thread, so none is missed. First in the list, so
    that a caller's ``execute_wrapper`` block open as the connection connects pops its own wrapper."""
    if observe not in connection.execute_wrappers:
        connection.execute_wrappers.insert(0, observe)


def _note(connection: BaseDatabaseWrapper, sql: object) -> None:
    thread = threading.current_thread()
    if thread.ident in _running or thread.name.startswith(_ENGINE_THREADS) or not _writes(sql):
        return
    watches = [watch for watch in list(_running.values()) if watch.alias == connection.alias]
    if not watches or thread.ident in keeper.replaying_threads():
        return  # another replay's own statement
    for watch in watches:
        watch.writers.setdefault(thread.name, sql if isinstance(sql, str) else str(sql))


def _writes(sql: object) -> bool:
    words = str(sql).split(None, 1)
    return bool(words) and words[0].upper() not in _READS


@contextmanager
def _watching(alias: str, steps: StepHost, pending: PendingDo, number: int) -> Iterator[None]:
    """Note, while the attempt's body runs, the writes other threads make to ``alias`` (``observe``), and
    report them once it ended."""
    watch = _running[threading.get_ident()] = _Watch(alias)
    try:
        yield
    finally:
        del _running[threading.get_ident()]
        if watch.writers:
            _report(steps, pending, number, watch)


def _report(steps: StepHost, pending: PendingDo, number: int, watch: _Watch) -> None:
    writers = ", ".join(f"{name!r} ({sql[:60]!r})" for name, sql in watch.writers.items())
    steps.report.written_outside_atomic_step(pending.key, number, watch.alias, writers)
