"""Waiting for something to happen to one instance: its end, or progress it reports.

What waits (``InstanceHandle.result()`` and ``aresult()``, the API's stream of an instance's progress)
looks at the instance, then waits here, then looks again. How it waits depends on the database:

- on PostgreSQL, a connection of the watch's own ``LISTEN``s on ``changes.INSTANCE_CHANNEL``, which
  migration 0022's triggers notify with the instance's primary key when it ends or writes a progress
  marker, as the change commits; a wait returns as soon as the instance it watches is named, and at the
  latest after ``timeout``, so that what a notification does not cover (a status the instance passes
  through, its deletion, a notification lost with a dropped connection) is still seen by the next look;
- elsewhere (SQLite), it sleeps a short ``POLL_SECONDS`` between two looks: a look is one query by
  primary key.

Each watch holds its own PostgreSQL connection while it waits (closed when it ends), besides the
connection Django gives the thread for the looks themselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.db import connections

from django_workflows.changes import INSTANCE_CHANNEL

logger = logging.getLogger("django_workflows.instance_watch")

POLL_SECONDS = 0.1
"""Where nothing notifies (SQLite): seconds between two looks at the instance."""


def _listens(alias: str) -> bool:
    if connections[alias].vendor != "postgresql":
        return False
    try:
        import psycopg  # noqa: F401
    except ImportError:  # psycopg2: no notifications with a timeout; poll
        return False
    return True


def _connection_params(alias: str) -> dict[str, Any]:
    params: dict[str, Any] = connections[alias].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


class InstanceWatch:
    """Waits for news of the instance with primary key ``instance_pk``, in the calling thread. A context
    manager: ``with InstanceWatch(pk, alias) as watch: ... watch.wait(seconds)``."""

    def __init__(self, instance_pk: int, alias: str):
        self.payload = str(instance_pk)
        self.alias = alias
        self.listening = _listens(alias)
        self.connection: Any = None

    def __enter__(self) -> InstanceWatch:
        if self.listening:
            self._connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _connect(self) -> None:
        import psycopg

        try:
            self.connection = psycopg.connect(**_connection_params(self.alias), autocommit=True)
            self.connection.execute(f'LISTEN "{INSTANCE_CHANNEL}"')
        except Exception as exc:
            logger.warning("Could not listen for %s (%s); looking every %s s instead.", INSTANCE_CHANNEL, exc,
                           POLL_SECONDS)
            self.close()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds (less, where it polls); True if the instance was named by a
        notification meanwhile. Look at the instance after either answer."""
        if self.connection is None:
            time.sleep(max(0.0, min(timeout, POLL_SECONDS)))
            if self.listening:
                self._connect()  # listen again: the next look covers what happened meanwhile
            return False
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                for notification in self.connection.notifies(timeout=left, stop_after=1):
                    if notification.payload == self.payload:
                        return True
        except Exception as exc:
            # A PostgreSQL restart, a terminated backend: look at the instance, and listen again next time.
            logger.warning("Listening for %s failed (%s); listening again.", INSTANCE_CHANNEL, exc)
            self.close()
        return False

    def close(self) -> None:
        if self.connection is not None:
            try:
                self.connection.close()
            except Exception:
                pass
        self.connection = None


class AsyncInstanceWatch:
    """``InstanceWatch`` for async code: waits in the event loop, holding no thread."""

    def __init__(self, instance_pk: int, alias: str):
        self.payload = str(instance_pk)
        self.alias = alias
        self.listening = _listens(alias)
        self.connection: Any = None

    async def __aenter__(self) -> AsyncInstanceWatch:
        if self.listening:
            await self._connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _connect(self) -> None:
        import psycopg

        try:
            self.connection = await psycopg.AsyncConnection.connect(**_connection_params(self.alias),
                                                                    autocommit=True)
            await self.connection.execute(f'LISTEN "{INSTANCE_CHANNEL}"')
        except Exception as exc:
            logger.warning("Could not listen for %s (%s); looking every %s s instead.", INSTANCE_CHANNEL, exc,
                           POLL_SECONDS)
            await self.close()

    async def wait(self, timeout: float) -> bool:
        """``InstanceWatch.wait``, awaited."""
        if self.connection is None:
            await asyncio.sleep(max(0.0, min(timeout, POLL_SECONDS)))
            if self.listening:
                await self._connect()
            return False
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                async for notification in self.connection.notifies(timeout=left, stop_after=1):
                    if notification.payload == self.payload:
                        return True
        except Exception as exc:
            logger.warning("Listening for %s failed (%s); listening again.", INSTANCE_CHANNEL, exc)
            await self.close()
        return False

    async def close(self) -> None:
        if self.connection is not None:
            try:
                await self.connection.close()
            except Exception:
                pass
        self.connection = None
