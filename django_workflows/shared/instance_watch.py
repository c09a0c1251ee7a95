"""Waiting for something to happen to one instance: its end, or progress it reports.

What waits (``InstanceHandle.result()`` and ``aresult()``, the API's stream of an instance's progress)
looks at the instance, then waits here, then looks again. How it waits depends on the database:

- on PostgreSQL, one connection per process and database ``LISTEN``s on ``changes.INSTANCE_CHANNEL``,
  which migration 0022's triggers notify with the instance's primary key when it ends or writes a
  progress marker, as the change commits; a thread of its own reads the notifications and wakes the
  watches of the instance each names, however many wait, in threads or in event loops. A wait returns as
  soon as its instance is named, and at the latest after ``timeout``, so that what a notification does not
  cover (a status the instance passes through, its deletion, a notification lost with a dropped
  connection) is still seen by the next look;
- elsewhere (SQLite), and while that connection is being opened again, it sleeps a short
  ``POLL_SECONDS`` between two looks: a look is one query by primary key.

An instance's end is notified only once something waits for it (migration 0027): a watch marks its
instance ``watched`` as it starts, before its caller's first look, so that the end committed after that
look is notified. PostgreSQL serializes the commits of the transactions that notify, and replays
completing instances nobody waited for committed one at a time. A watch inside the caller's transaction
does not mark (the mark would hold the row's lock until the caller commits, and the replay ending the
instance would wait for it): it polls.

A hundred callers waiting for results hold one listening connection between them, besides the
connections Django gives their threads for the looks (one, for ``aresult()`` and streams in one event
loop). The first watch opens it and the last to end closes it: a process where nothing waits holds none.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import threading
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections, router

from django_workflows.shared.changes import INSTANCE_CHANNEL, close_listening

logger = logging.getLogger("django_workflows.instance_watch")

POLL_SECONDS = 0.1
"""Where nothing notifies (SQLite): seconds between two looks at the instance."""
CONNECT_SECONDS = 5.0
"""How long a new watch waits for the listening connection before it looks, polling if it is not there."""
_READ_SECONDS = 1.0  # how long the listener reads notifications before it checks whether it is still needed
_RETRY_SECONDS = 1.0  # how long it waits before listening again after the connection failed


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


class _Waiter:
    """One watch's place among the listener's: woken when its instance is named."""

    def __init__(self, payload: str):
        self.payload = payload
        self.event = threading.Event()

    def wake(self) -> None:
        self.event.set()


class _AsyncWaiter(_Waiter):
    """A watch in an event loop: woken in that loop, from the listener's thread."""

    def __init__(self, payload: str, loop: asyncio.AbstractEventLoop):
        super().__init__(payload)
        self.loop = loop
        self.woken = asyncio.Event()

    def wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.woken.set)
        except RuntimeError:  # its loop has closed: nothing waits any more
            pass


class _Listener:
    """The process's one listening connection to a database, open while a watch waits, and the watches it
    wakes. The first watch opens it; the last to end closes it before it returns, so no connection is left
    behind a wait (a test database can be dropped as the last test ends)."""

    def __init__(self, alias: str):
        self.alias = alias
        self.lock = threading.Lock()  # the watches
        self.lifecycle = threading.Lock()  # the thread's start and end, one after the other
        self.waiters: dict[str, set[_Waiter]] = {}
        # Set while the connection listens: a watch that sees it set may look, and be woken by what
        # commits after its look.
        self.listening = threading.Event()
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        # What interrupts the thread's wait for notifications when the last watch ends: a socket pair of
        # each thread's own, whose ends the thread and the last watch close.
        self.interrupt: socket.socket | None = None

    def add(self, waiter: _Waiter) -> None:
        with self.lifecycle:
            with self.lock:
                self.waiters.setdefault(waiter.payload, set()).add(waiter)
            if self.thread is None:
                self.stop = threading.Event()  # its own: one that outlived its join ends all the same
                self.interrupt, interrupted = socket.socketpair()
                self.thread = threading.Thread(target=self._run, args=(self.stop, interrupted), daemon=True,
                                               name=f"django_workflows listener {self.alias}")
                self.thread.start()

    def remove(self, waiter: _Waiter) -> None:
        with self.lifecycle:
            with self.lock:
                same = self.waiters.get(waiter.payload)
                if same is not None:
                    same.discard(waiter)
                    if not same:
                        del self.waiters[waiter.payload]
                last = not self.waiters
            if last and self.thread is not None and self.interrupt is not None:
                self.stop.set()
                self.interrupt.close()  # the thread's end of the pair reads its end, and the thread stops
                # Bounded: a connection being opened to a database that does not answer is left to end.
                self.thread.join(CONNECT_SECONDS)
                self.thread = self.interrupt = None

    def _wake(self, payload: str | None = None) -> None:
        """Wake the watches of the instance ``payload`` names; every watch when None."""
        with self.lock:
            woken = [w for same in self.waiters.values() for w in same] if payload is None else list(
                self.waiters.get(payload, ()))
        for waiter in woken:
            waiter.wake()

    def _run(self, stop: threading.Event, interrupted: socket.socket) -> None:
        import psycopg

        connection: Any = None
        failed = False  # a connection failed: notifications may have been lost
        try:
            while not stop.is_set():
                try:
                    if connection is None:
                        connection = psycopg.connect(**_connection_params(self.alias), autocommit=True)
                        connection.execute(f'LISTEN "{INSTANCE_CHANNEL}"')
                        self.listening.set()
                        if failed:  # what happened while nobody listened is unknown: every watch looks
                            self._wake()
                            failed = False
                    if select.select([connection.fileno(), interrupted], [], [], _READ_SECONDS)[0]:
                        for notification in connection.notifies(timeout=0):
                            self._wake(notification.payload)
                except Exception as exc:
                    # A PostgreSQL restart, a terminated backend: the watches poll until it listens again.
                    logger.warning("Listening for %s failed (%s); looking every %s s until it listens again.",
                                   INSTANCE_CHANNEL, exc, POLL_SECONDS)
                    self.listening.clear()
                    close_listening(connection)
                    connection, failed = None, True
                    self._wake()
                    select.select([interrupted], [], [], _RETRY_SECONDS)  # less if the last watch ends
        finally:
            self.listening.clear()
            close_listening(connection)
            interrupted.close()


_listeners: dict[str, _Listener] = {}
_listeners_lock = threading.Lock()


def _listener(alias: str) -> _Listener:
    with _listeners_lock:
        found = _listeners.get(alias)
        if found is None:
            found = _listeners[alias] = _Listener(alias)
        return found


def _forget_listeners() -> None:
    # A forked process (a worker's pool) has none of its parent's threads: it listens on its own.
    global _listeners_lock
    _listeners.clear()
    _listeners_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_listeners)


def _mark_watched(instance_pk: int) -> bool:
    """Have the instance's end notified (``Instance.watched``); False where it is not marked, and the watch
    polls: outside PostgreSQL, inside the caller's transaction, when the row is locked, or when the mark
    fails. A locked row is not waited for: an ``atomic=True`` step holds its instance's row (the journal's
    fence) while its body runs, for minutes perhaps, and the caller's ``result(timeout=...)`` must not
    wait that long before its first look."""
    from django_workflows.models import Instance

    connection = connections[router.db_for_write(Instance)]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    table = connection.ops.quote_name(Instance._meta.db_table)
    try:
        with connection.cursor() as cursor:
            # Once per instance: the callers that wait for it later find it marked, and write nothing.
            cursor.execute(
                f"WITH row AS (SELECT id, watched FROM {table} WHERE id = %s), "
                f"marked AS (UPDATE {table} SET watched = TRUE WHERE id = (SELECT id FROM {table} "
                "WHERE id = %s AND NOT watched FOR UPDATE SKIP LOCKED) RETURNING id) "
                "SELECT (SELECT watched FROM row), EXISTS (SELECT 1 FROM marked)", [instance_pk, instance_pk])
            already, now_marked = cursor.fetchone()
    except DatabaseError:
        logger.warning("Could not mark instance %s watched; looking at it every %s s.", instance_pk,
                       POLL_SECONDS, exc_info=True)
        return False
    return bool(already or now_marked)


class InstanceWatch:
    """Waits for news of the instance with primary key ``instance_pk``, in the calling thread. A context
    manager: ``with InstanceWatch(pk, alias) as watch: ... watch.wait(seconds)``."""

    def __init__(self, instance_pk: int, alias: str):
        self.listener = _listener(alias) if _listens(alias) else None
        self.instance_pk = instance_pk
        self.waiter = _Waiter(str(instance_pk))
        self.marked = False

    @property
    def listening(self) -> bool:
        return self.marked and self.listener is not None and self.listener.listening.is_set()

    def __enter__(self) -> InstanceWatch:
        if self.listener is not None:
            self.listener.add(self.waiter)
            if self.listener.listening.wait(CONNECT_SECONDS):
                self.marked = _mark_watched(self.instance_pk)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.listener is not None:
            self.listener.remove(self.waiter)

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds (less, where it polls); True if the instance was named by a
        notification meanwhile. Look at the instance after either answer."""
        if not self.listening:
            time.sleep(max(0.0, min(timeout, POLL_SECONDS)))
            return False
        named = self.waiter.event.wait(max(timeout, 0.0))
        # Cleared before the look that follows: a notification after it wakes the next wait.
        self.waiter.event.clear()
        return named


class AsyncInstanceWatch:
    """``InstanceWatch`` for async code: waits in the event loop, holding no thread."""

    def __init__(self, instance_pk: int, alias: str):
        self.listener = _listener(alias) if _listens(alias) else None
        self.instance_pk = instance_pk
        self.payload = str(instance_pk)
        self.waiter: _AsyncWaiter | None = None
        self.marked = False

    @property
    def listening(self) -> bool:
        return self.marked and self.listener is not None and self.listener.listening.is_set()

    async def __aenter__(self) -> AsyncInstanceWatch:
        if self.listener is not None:
            self.waiter = _AsyncWaiter(self.payload, asyncio.get_running_loop())
            self.listener.add(self.waiter)
            if not self.listener.listening.is_set():
                await asyncio.to_thread(self.listener.listening.wait, CONNECT_SECONDS)
            if self.listener.listening.is_set():
                # Through Django's thread for database calls, as the looks that follow.
                self.marked = await sync_to_async(_mark_watched)(self.instance_pk)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.listener is not None and self.waiter is not None:
            # In a thread: the last watch to end waits for the listening connection to close.
            await asyncio.to_thread(self.listener.remove, self.waiter)

    async def wait(self, timeout: float) -> bool:
        """``InstanceWatch.wait``, awaited."""
        if self.waiter is None or not self.listening:
            await asyncio.sleep(max(0.0, min(timeout, POLL_SECONDS)))
            return False
        try:
            await asyncio.wait_for(self.waiter.woken.wait(), max(timeout, 0.0))
            named = True
        except TimeoutError:
            named = False
        self.waiter.woken.clear()
        return named
