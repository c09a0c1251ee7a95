"""``GET <name>/instances/<id>/stream/``: an instance's status and progress as server-sent events, for a
page to follow with ``EventSource`` until the instance ends.

    const source = new EventSource("/workflows/import/instances/42/stream/");
    source.addEventListener("progress", e => show(JSON.parse(e.data).value));
    source.addEventListener("status", e => { if (finished(JSON.parse(e.data).status)) source.close(); });

It answers as the instance detail does (the same authentication, permissions and ``INSTANCE_ACCESS`` rule,
the same JSON 404 for an instance the caller may not see), then streams:

- ``status``: ``{status, output, error}`` at once, then whenever the status changes; the last event of a
  stream whose instance has ended (``complete``, ``errored``, ``terminated``), with its output or error;
- ``progress``: ``{value, at}``, the latest ``step.progress`` at once (if any), then each one reported, in
  order, its ``id`` the journal row's, so that a reconnecting ``EventSource`` (which sends it back as
  ``Last-Event-ID``) gets the progress it missed, and no progress twice;
- a comment line every ``KEEPALIVE_SECONDS`` while nothing happens, so that proxies keep it open.

It looks at the instance when a notification names it (PostgreSQL: its end, its progress) and at least
every ``LOOK_SECONDS``, the status changes in between included; a stream lasts at most ``STREAM_SECONDS``,
then ends, and the browser's ``EventSource`` reconnects (after ``retry``) and goes on where it was. Under
ASGI it waits in the event loop, holding no thread; under WSGI it holds its worker thread while it lasts.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import router
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework.renderers import JSONRenderer

from django_workflows.api import exceptions
from django_workflows.api.pagination import whole_number
from django_workflows.api.schema import operation
from django_workflows.api.views import WorkflowAPIView, errors
from django_workflows.shared.instance_watch import AsyncInstanceWatch, InstanceWatch
from django_workflows.models import FINISHED_STATUSES, Instance
from django_workflows.store import progress as instance_progress

STREAM_SECONDS = 300.0
"""How long one stream lasts before it ends and the browser reconnects: a WSGI thread is not held for ever."""
LOOK_SECONDS = 0.5
"""How often a stream looks at its instance when no notification wakes it (statuses in between an end)."""
KEEPALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 1000
"""How long the browser waits to reconnect once a stream ends before its instance has."""


def _event(kind: str, data: object, event_id: int | None = None) -> str:
    head = "" if event_id is None else f"id: {event_id}\n"
    return f"{head}event: {kind}\ndata: {json.dumps(data, cls=DjangoJSONEncoder)}\n\n"


class InstanceStream:
    """What one stream has shown of the instance ``instance_pk``, and what it shows next."""

    def __init__(self, instance_pk: int, last_progress: int | None):
        self.instance_pk = instance_pk
        # The journal id of the last progress shown (None: show the latest first, not the whole history).
        self.last_progress = last_progress
        self.status: str | None = None
        self.ended = False

    def look(self) -> list[str]:
        """The events since the last look (two queries). The status is read first: progress is written
        before an instance ends, so an end seen here comes after every progress it reported."""
        row = Instance.objects.filter(pk=self.instance_pk).values("status", "output", "error").first()
        if row is None:  # deleted meanwhile (retention): nothing more will happen to it
            self.ended = True
            return []
        if self.last_progress is None:
            latest = instance_progress.latest(self.instance_pk)
            reported = [] if latest is None else [latest]
        else:
            reported = instance_progress.since(self.instance_pk, self.last_progress)
        chunks = [_event("progress", {"value": item.value, "at": item.at}, item.id) for item in reported]
        if reported:
            self.last_progress = reported[-1].id
        elif self.last_progress is None:
            self.last_progress = 0
        if row["status"] != self.status:
            self.status = row["status"]
            self.ended = self.status in FINISHED_STATUSES
            chunks.append(_event("status", row))
        return chunks

    def paced(self, chunks: list[str], started: float, quiet_since: float) -> tuple[list[str], float, bool]:
        """What a look sends, for both ways of waiting: its chunks, or a keep-alive comment after a quiet
        spell; when the stream was last not quiet; and whether it ends (the instance ended, or the stream
        is as long as a stream may be)."""
        now = time.monotonic()
        if self.ended or now - started >= STREAM_SECONDS:
            return chunks, quiet_since, True
        if chunks:
            return chunks, now, False
        if now - quiet_since >= KEEPALIVE_SECONDS:
            return [": keep-alive\n\n"], now, False
        return chunks, quiet_since, False

    def events(self) -> Iterator[str]:
        """The stream, waiting in this thread (WSGI)."""
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        started = quiet_since = time.monotonic()
        with InstanceWatch(self.instance_pk, router.db_for_read(Instance)) as watch:
            while True:
                chunks, quiet_since, done = self.paced(self.look(), started, quiet_since)
                yield from chunks
                if done:
                    return
                watch.wait(LOOK_SECONDS)

    async def aevents(self) -> AsyncIterator[str]:
        """The stream, waiting in the event loop (ASGI)."""
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        started = quiet_since = time.monotonic()
        look = sync_to_async(self.look)
        async with AsyncInstanceWatch(self.instance_pk, router.db_for_read(Instance)) as watch:
            while True:
                chunks, quiet_since, done = self.paced(await look(), started, quiet_since)
                for chunk in chunks:
                    yield chunk
                if done:
                    return
                await watch.wait(LOOK_SECONDS)


LAST_EVENT_ID = OpenApiParameter(
    "Last-Event-ID", str, OpenApiParameter.HEADER, required=False,
    description="The id of the last progress event received: the stream goes on after it (EventSource sends "
                "it by itself when it reconnects).")


class InstanceStreamView(WorkflowAPIView):
    """``GET <name>/instances/<id>/stream/``: see the module."""

    def perform_content_negotiation(self, request, force=False):
        # An EventSource asks for text/event-stream alone; the stream is built here, not rendered, and a
        # refusal is JSON, as every error of the API.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @operation(operation_id="instances_stream", parameters=[LAST_EVENT_ID],
               responses={(200, "text/event-stream"): OpenApiResponse(
                   description="Server-sent events: status ({status, output, error}) and progress ({value, at}) "
                               "until the instance ends, or for at most 5 minutes (the browser reconnects)."),
                          **errors(400, 401, 403, 404)})
    def get(self, request, name, instance_id):
        row = self.instance(name, instance_id)
        last = request.headers.get("Last-Event-ID")
        if last is not None and not whole_number(last, 0, 2**63 - 1):
            raise exceptions.WorkflowAPIError(
                f"Last-Event-ID must be the id of a progress event this stream sent (a whole number), got "
                f"{last[:100]!r}; leave it out to start from the latest progress.", "invalid_last_event_id")
        stream = InstanceStream(row.pk, None if last is None else int(last))
        # Served by ASGI, the stream waits in the event loop; by WSGI, in the request's thread.
        served_async = isinstance(request._request, ASGIRequest)
        response = StreamingHttpResponse(stream.aevents() if served_async else stream.events(),
                                         content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx would hold the events back to fill its buffer
        return response
