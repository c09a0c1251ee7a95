"""Noticing that the database changed without asking it: what lets an idle worker sleep.

An idle worker must notice new work at once (a replay enqueued, an earlier wake
time) without querying for it several times a second. A ``ChangeWatcher``
answers "may the tables have changed?" at no cost to the database:

- on PostgreSQL, triggers (migration 0005) ``NOTIFY`` a channel when a replay
  is enqueued on the ORM broker's queue or an instance gets a wake time, and
  the watcher ``LISTEN``s on a connection of its own;
- on SQLite, every commit writes the database's write-ahead log (or, without
  WAL, the file itself), whose size and modification time a ``stat()`` reads
  (no statement is run);
- elsewhere (or on PostgreSQL without the triggers) it says "changed" once
  every poll interval, which is plain polling; a lost LISTEN connection (a
  PostgreSQL restart) is reported as a change and opened again.

A watcher may report a change that was not one (any commit on SQLite); it never
hides one it could see, and the loops that use it look anyway every
``IDLE_RECHECK_SECONDS``.
"""

from __future__ import annotations

import logging
import os
import pathlib
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from django.db import connections

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("django_workflows.changes")

QUEUE_CHANNEL = "django_workflows_queue"
"""Notified when a task is added to django-q2's ORM queue (``django_q_ormq``)."""
WAKE_CHANNEL = "django_workflows_wake"
"""Notified when an instance starts waiting with a wake time."""
INSTANCE_CHANNEL = "django_workflows_instance"
"""Notified with an instance's primary key when it ends or reports progress (migration 0022)."""

STAT_INTERVAL = 0.05
"""Seconds between two looks at SQLite's files while they change: a stat() is a few microseconds, and a
reader that looks less often than commits come takes what arrived meanwhile in one batch."""
IDLE_INTERVAL = 0.01
IDLE_AFTER_SECONDS = 0.05
"""Files unchanged for ``IDLE_AFTER_SECONDS`` are looked at every ``IDLE_INTERVAL``: the first commit after
a quiet moment (a timer's claim, a create in a web request) reaches the reader within 10 ms, not 50. A
stream of commits (a busy worker commits every few milliseconds) keeps it at ``STAT_INTERVAL``. Two stat()
calls a look, 100 looks a second: about half a percent of a core for an idle reader."""
FOLLOW_UP_INTERVAL = 0.005
FOLLOW_UP_SECONDS = 0.1
"""A reader that looked after a change and found nothing for it has SQLite's files looked at every
``FOLLOW_UP_INTERVAL`` for ``FOLLOW_UP_SECONDS`` (``follow_up``): commits come in pairs (the wake-up
loop's claim, then its replays' enqueue; an event's inbox row, then its replay's enqueue), and the reader
woken by the first finds its work a few milliseconds later, in the second, which at ``STAT_INTERVAL``
waited up to 50 ms for the next look. A reader that found work keeps the longer interval, so that under
load it takes what arrived meanwhile in one batch."""


class ChangeWatcher:
    """Polling: it cannot tell, so it reports a change every ``interval`` seconds."""

    kind = "polling"

    def __init__(self, interval: float):
        self.interval = interval
        self._next = time.monotonic()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; return True if the tables may have changed meanwhile."""
        left = self._next - time.monotonic()
        if left > 0:
            time.sleep(max(0.0, min(timeout, left)))
            if time.monotonic() < self._next:
                return False
        self._next = time.monotonic() + self.interval
        return True

    def follow_up(self) -> None:
        """The look after the last change found nothing: the change it waits for may be a moment away."""

    def close(self) -> None:
        pass


class FileWatcher(ChangeWatcher):
    """SQLite: a commit changes the write-ahead log's (or the database file's) size or mtime."""

    kind = "sqlite-file"

    def __init__(self, path: str):
        super().__init__(STAT_INTERVAL)
        self.paths = (path, f"{path}-wal")
        # When the last connection to a database closes, SQLite checkpoints and deletes its log,
        # which would look like a change each time a process closes its connection (Django closes
        # them after every request or task unless CONN_MAX_AGE is set). A read-only connection of
        # our own, opened once and idle, keeps the log in place.
        self._pin = None
        try:
            self._pin = sqlite3.connect(f"{pathlib.Path(path).resolve().as_uri()}?mode=ro", uri=True,
                                        check_same_thread=False)
            self._pin.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.Error:
            self.close()
        self.last = self._signature()
        self.followed_up_at = float("-inf")  # monotonic time of the last follow_up()
        self.changed_at = float("-inf")  # monotonic time of the last change seen
        self.looked_at = float("-inf")  # monotonic time of the last look at the files

    def close(self) -> None:
        if self._pin is not None:
            self._pin.close()
            self._pin = None

    def _signature(self) -> tuple:
        signature: list[tuple[int, int, int] | None] = []
        for path in self.paths:
            try:
                stat = os.stat(path)
            except OSError:
                signature.append(None)
            else:
                signature.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
        return tuple(signature)

    def follow_up(self) -> None:
        self.followed_up_at = time.monotonic()

    def interval_at(self, now: float) -> float:
        """Seconds until the next look, at monotonic time ``now``: shorter just after a follow-up, and
        while the files are quiet."""
        if now - self.followed_up_at < FOLLOW_UP_SECONDS:
            return FOLLOW_UP_INTERVAL
        if now - self.changed_at >= IDLE_AFTER_SECONDS:
            return min(IDLE_INTERVAL, self.interval)
        return self.interval

    def wait(self, timeout: float) -> bool:
        """Whether the files changed, looked at an interval (``interval_at``) after the last look, within
        ``timeout`` seconds. The interval counts from the last look, not from the call: a reader that
        handles a change and is back at once would otherwise look again at once, find the commits made
        meanwhile (its own replays', on a busy worker every few milliseconds), and go round again without
        a pause, querying the database at each turn."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            pause = self.looked_at + self.interval_at(now) - now
            if pause > 0:
                if now + pause > deadline:
                    time.sleep(max(deadline - now, 0.0))
                    return False
                time.sleep(pause)
            signature = self._signature()
            self.looked_at = now = time.monotonic()
            if signature != self.last:
                self.last = signature
                self.changed_at = now
                return True
            if now >= deadline:
                return False


class NotifyWatcher(ChangeWatcher):
    """PostgreSQL: LISTEN on ``channel`` over a connection of its own (psycopg 3)."""

    kind = "postgresql-listen"

    def __init__(self, alias: str, channel: str, interval: float):
        super().__init__(interval)
        self.alias = alias
        self.channel = channel
        self.connection: psycopg.Connection[Any] | None = None

    def _connect(self) -> None:
        import psycopg

        params = connections[self.alias].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self.connection = psycopg.connect(**params, autocommit=True)
        self.connection.execute(f'LISTEN "{self.channel}"')
        if self.connection.execute("SELECT 1 FROM pg_trigger WHERE tgname = %s", [self.channel]).fetchone() is None:
            logger.warning("No trigger notifies %s (run manage.py migrate); polling every %s s instead.",
                           self.channel, self.interval)
            self.kind = "polling"
            self.close()

    def wait(self, timeout: float) -> bool:
        if self.kind == "polling":
            return super().wait(timeout)
        started = time.monotonic()
        try:
            if self.connection is None or self.connection.closed:
                self._connect()
                # Whatever happened while nobody listened is unknown: report a change.
                return True
            received = False
            for _ in self.connection.notifies(timeout=max(timeout, 0.0), stop_after=1):
                received = True
            if received:
                # A burst of commits sends a burst of notifications: one look serves them all.
                for _ in self.connection.notifies(timeout=0.001):
                    pass
            return received
        except Exception as exc:
            # A PostgreSQL restart or a terminated backend: report a change, listen again next time.
            logger.warning("Listening for %s failed (%s); listening again.", self.channel, exc)
            self.close()
            time.sleep(max(0.0, min(1.0, timeout - (time.monotonic() - started))))
            return True

    def close(self) -> None:
        close_listening(self.connection)
        self.connection = None


def close_listening(connection: Any) -> None:
    """Close a connection that listens for notifications (or None), whatever state a failure left it in:
    a listener that failed listens again on a new one."""
    if connection is not None:
        try:
            connection.close()
        except Exception:
            pass


def watcher(alias: str, channel: str, interval: float) -> ChangeWatcher:
    """The best watcher for the database ``alias``: LISTEN on PostgreSQL (polling if migration 0005's
    trigger is missing), the files of a file-backed SQLite, polling every ``interval`` otherwise.
    Building one makes no query: a watcher connects on its first wait."""
    connection = connections[alias]
    if connection.vendor == "sqlite":
        name = str(connection.settings_dict["NAME"])
        if name and name != ":memory:" and not name.startswith("file:") and os.path.exists(name):
            return FileWatcher(name)
    elif connection.vendor == "postgresql" and _psycopg3():
        return NotifyWatcher(alias, channel, interval)
    return ChangeWatcher(interval)


def _psycopg3() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True

