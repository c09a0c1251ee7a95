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
"""

from __future__ import annotations

import inspect
from contextlib import ExitStack, contextmanager

from django.db import DatabaseError, IntegrityError, connections, transaction

from django_workflows import clock
from django_workflows.control_flow import StoreError
from django_workflows.errors import WorkflowConfigError
from django_workflows.timeouts import callers_transactions


class _RollBack(Exception):
    """The attempt failed: its transaction rolls back, and the failure is journaled after it."""


def attempt_and_journal(steps, pending, number: int, journal_success) -> tuple:
    """Run attempt ``number`` of an atomic step and, if it succeeds, journal it with
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
    outcome = None
    try:
        with transaction.atomic(using=alias):
            with _only_on(alias, steps, pending):
                outcome = steps.attempt(pending, number, writer.connection, callers)
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
        return outcome, None
    except IntegrityError as exc:
        # At the commit, a deferred constraint the body's writes broke (Django's foreign keys are
        # deferred): the body's failure, rolled back with its row.
        return outcome._replace(ended=clock.now(), text=None, value=None, failure=exc), None
    except DatabaseError as exc:
        # The commit's outcome is unknown (the connection dropped): the next replay reads the journal,
        # which has the row if and only if the body's writes committed.
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc
    return outcome, status


@contextmanager
def _only_on(alias: str, steps, pending):
    """Refuse, for the attempt, every query on a database other than ``alias``."""
    with ExitStack() as stack:
        for other in connections:
            if other != alias:
                stack.enter_context(connections[other].execute_wrapper(_refusal(alias, other, steps, pending)))
        yield


def _refusal(alias: str, other: str, steps, pending):
    def refuse(execute, sql, params, many, context):
        steps.fail_fatally(WorkflowConfigError(
            f"Step {pending.name!r} is atomic=True: its body and its journal row commit in one transaction "
            f"of database {alias!r}, and it queried database {other!r}, whose writes would commit on their "
            f"own. Keep an atomic step's queries on {alias!r}, or drop atomic=True (the step is then at "
            "least once).",
            step=pending.key,
        ))

    return refuse
