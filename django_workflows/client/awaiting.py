"""Waiting for an instance's end: what ``InstanceHandle.result()`` and ``aresult()`` do.

    output = instance.result(timeout=30)             # blocks this thread
    output = await instance.aresult(timeout=30)      # in an async view: holds no thread while it waits

Each looks at the instance (its ``status()``, one query), and while it has not ended waits for news of it
(``instance_watch``: a notification on PostgreSQL, a short poll elsewhere), then looks again. It ends:

- ``complete``: the output is returned, its typed values revived, as ``status()["output"]`` gives it;
- ``errored``: ``InstanceErrored`` is raised, its ``error`` the instance's ``{name, message}``;
- ``terminated``: ``InstanceTerminated`` is raised, its ``error`` the instance's (its rollback's outcome
  inside, when a rollback ran);
- not ended within ``timeout`` seconds: ``ResultTimeout``, its ``status`` where the instance stood.

A paused instance has not ended: the wait goes on through a pause and its resume. An instance deleted
meanwhile (retention, a restart of a parent) is ``InstanceNotFound``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.db import router

from django_workflows.errors import InstanceErrored, InstanceTerminated, InvalidParams, ResultTimeout
from django_workflows.shared.instance_watch import AsyncInstanceWatch, InstanceWatch
from django_workflows.models import Instance, InstanceStatus

RECHECK_SECONDS = 2.0
"""Where notifications wake the wait (PostgreSQL): it looks at the instance this often all the same."""


class Awaitable(Protocol):
    """The handle of the instance waited for."""

    pk: int
    id: str
    workflow_name: str

    def status(self) -> dict[str, Any]: ...


def seconds(timeout: float | timedelta | None) -> float | None:
    """``timeout`` as seconds (None: no limit); anything but a number from zero, a ``timedelta`` or None is
    ``InvalidParams``."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise InvalidParams(f"result(timeout=...) takes seconds from 0 (a number or a timedelta), or None to wait "
                            f"as long as it takes; got {timeout!r}")
    return float(timeout)


def outcome(handle: Awaitable, status: dict[str, Any]) -> tuple[bool, Any]:
    """``(True, output)`` for a complete instance; ``(False, None)`` for one that has not ended; the
    instance's error raised for one that ended otherwise."""
    label = f"{handle.workflow_name}/{handle.id}"
    error = status.get("error")
    if status["status"] == InstanceStatus.COMPLETE:
        return True, status["output"]
    if status["status"] == InstanceStatus.ERRORED:
        described = f"{error.get('name')}: {error.get('message')}" if isinstance(error, dict) else "no error recorded"
        raise InstanceErrored(f"Instance {label} ended errored ({described}).", workflow=handle.workflow_name,
                              instance_id=handle.id, error=error)
    if status["status"] == InstanceStatus.TERMINATED:
        raise InstanceTerminated(f"Instance {label} was terminated; it has no output.", workflow=handle.workflow_name,
                                 instance_id=handle.id, error=error)
    return False, None


def _timed_out(handle: Awaitable, timeout: float, status: str) -> ResultTimeout:
    return ResultTimeout(
        f"Instance {handle.workflow_name}/{handle.id} did not end within {timeout:g} s: it is {status}. Nothing "
        "changed; wait again, or look at its steps.", workflow=handle.workflow_name, instance_id=handle.id,
        status=status, timeout=timeout)


def result(handle: Awaitable, timeout: float | timedelta | None) -> Any:
    """The instance's output once it has ended, waiting in this thread (see the module)."""
    limit = seconds(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    with InstanceWatch(handle.pk, router.db_for_read(Instance)) as watch:
        while True:
            # Looked at after the watch listens: an end committed in between is seen by this look.
            ended, output, wait = _look(handle, handle.status(), limit, deadline)
            if ended:
                return output
            watch.wait(wait)


async def aresult(handle: Awaitable, timeout: float | timedelta | None) -> Any:
    """``result()`` for async code: it waits in the event loop, and looks at the instance through Django's
    thread for database calls, as the ORM's own async methods do."""
    limit = seconds(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    look = sync_to_async(handle.status)
    async with AsyncInstanceWatch(handle.pk, router.db_for_read(Instance)) as watch:
        while True:
            ended, output, wait = _look(handle, await look(), limit, deadline)
            if ended:
                return output
            await watch.wait(wait)


def _look(handle: Awaitable, status: dict[str, Any], limit: float | None, deadline: float | None
          ) -> tuple[bool, Any, float]:
    """One look at the instance, its ``status()``: whether it has ended, its output, and otherwise how long to
    wait for a change before the next look; ``ResultTimeout`` once the deadline has passed."""
    ended, output = outcome(handle, status)
    if ended:
        return True, output, 0.0
    left = RECHECK_SECONDS if deadline is None else deadline - time.monotonic()
    if left <= 0:
        raise _timed_out(handle, limit or 0.0, status["status"])
    return False, None, min(left, RECHECK_SECONDS)
