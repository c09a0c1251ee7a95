"""The handles from async code: an ``a``-prefixed twin of each method that touches the database, as
Django's ORM names its own (``aget``, ``acreate``), and the wait for an instance's result.

    async def order_placed(request):
        instance = await workflows.get("fulfil-order").acreate(params={"order": 42})
        await instance.asend_event(type="paid", payload={"amount": 120})
        return JsonResponse(await instance.astatus())

Each twin runs its method through ``sync_to_async`` with Django's thread-sensitive default, as the ORM's
async methods do: every database call of a request runs in one thread, one after the other, so a twin
inside ``transaction.atomic`` (run in that thread too) sees and joins the same transaction. The twins
take and return what their methods do, and raise the same errors. ``aresult()`` is native: it waits in
the event loop (``django_workflows.client.awaiting``), and only its looks at the instance take that thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async

from django_workflows.client import awaiting
from django_workflows.shared import declared_events


class AsyncWorkflowMethods:
    """``WorkflowHandle``'s async twins."""

    create: Callable[..., Any]
    create_batch: Callable[..., Any]
    get: Callable[..., Any]

    async def acreate(self, id: str | None = None, params: Any = None,  # noqa: A002
                      retention: dict | None = None, **options: Any) -> Any:
        """``create()``, awaited: an ``InstanceHandle``. ``options`` are ``create()``'s keyword arguments
        (``subject``, ``tags``, ``timeout``, ``start_at``, ``start_in``, ``debounce``, ``priority``,
        ``queue``), passed on as they are, so that the twin takes whatever ``create()`` takes."""
        return await sync_to_async(self.create)(id, params, retention, **options)

    async def acreate_batch(self, batch: Any) -> list[Any]:
        """``create_batch()``, awaited."""
        return await sync_to_async(self.create_batch)(batch)

    async def aget(self, id: str) -> Any:  # noqa: A002
        """``get()``, awaited."""
        return await sync_to_async(self.get)(id)


class AsyncInstanceMethods:
    """``InstanceHandle``'s async twins, and its result, waited for or awaited."""

    pk: int
    id: str
    workflow_name: str
    status: Callable[[], dict]
    progress: Callable[[], Any]
    pause: Callable[[], None]
    resume: Callable[[], None]
    terminate: Callable[..., None]
    restart: Callable[..., None]
    send_event: Callable[..., Any]
    discard_events: Callable[..., Any]

    def result(self, timeout: float | timedelta | None = None) -> Any:
        """Wait for the instance's end and return its output (typed values revived, as ``status()`` gives
        it). Raises ``InstanceErrored`` or ``InstanceTerminated`` (their ``error``: the instance's) if it
        ended otherwise, ``ResultTimeout`` if it has not ended within ``timeout`` seconds (None: as long as
        it takes). Woken by PostgreSQL's notifications, or polling elsewhere (``django_workflows.client.awaiting``).
        Blocks the calling thread: from async code, ``await aresult()``."""
        return awaiting.result(self, timeout)

    async def aresult(self, timeout: float | timedelta | None = None) -> Any:
        """``result()``, awaited: waits in the event loop, holding no thread."""
        return await awaiting.aresult(self, timeout)

    async def astatus(self) -> dict:
        """``status()``, awaited."""
        return await sync_to_async(self.status)()

    async def aprogress(self) -> Any:
        """``progress()``, awaited."""
        return await sync_to_async(self.progress)()

    async def apause(self) -> None:
        """``pause()``, awaited."""
        await sync_to_async(self.pause)()

    async def aresume(self) -> None:
        """``resume()``, awaited."""
        await sync_to_async(self.resume)()

    async def aterminate(self, rollback: bool = False) -> None:
        """``terminate()``, awaited."""
        await sync_to_async(self.terminate)(rollback=rollback)

    async def arestart(self, from_step: str | None = None, count: int = 1) -> None:
        """``restart()``, awaited."""
        await sync_to_async(self.restart)(from_step=from_step, count=count)

    async def asend_event(self, type: str, payload: Any = None, *,  # noqa: A002
                          channel: str = declared_events.PYTHON, user: Any = None, sender: str | None = None,
                          delivery: str | None = None, idempotency_key: str | None = None) -> Any:
        """``send_event()``, awaited: the stored event's id, a ``SentEvent``."""
        return await sync_to_async(self.send_event)(type, payload, channel=channel, user=user, sender=sender,
                                                    delivery=delivery, idempotency_key=idempotency_key)

    async def adiscard_events(self, event_ids: list[int] | None = None, *,
                              sender: str | None = None) -> list[tuple[int, str, str]]:
        """``discard_events()``, awaited."""
        return await sync_to_async(self.discard_events)(event_ids, sender=sender)
