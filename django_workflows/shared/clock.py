"""The engine's sense of time: the database server's clock.

Leases, wake times, deadlines and timestamps are compared by every process that shares the database,
on however many machines. If each used its own clock, a machine running 5 s ahead would take over
leases 5 s before they expire and wake timers 5 s early. So every time the engine writes or compares
comes from ``now()``, which is the database server's clock as this process last read it, carried
forward by this process's monotonic clock (which no clock skew, NTP step or ``faketime`` moves):

- the reading is one ``SELECT`` on a connection of its own (so it never runs inside a caller's
  transaction or shows in a test's query count), taken at first use and every ``REFRESH_SECONDS``;
- on SQLite the database is a file on this machine and its clock is this machine's: no reading;
- if the database cannot be reached for a reading, the last one goes on serving; before the first
  there is no time to serve: ``now()`` raises ``ClockUnavailable`` (a ``DatabaseError``, so a replay
  is abandoned and tried again as for any other statement that failed), and never falls back to this
  machine's clock, which may be minutes off. A worker that starts while its database restarts is
  the common case.

``django_workflows.testing`` replaces this clock with one that moves only when a test says so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

from django.db import DatabaseError

logger = logging.getLogger("django_workflows.clock")

# How often the database's clock is read again. Between readings the monotonic clock carries it: its
# rate differs from the server's by parts per million, well under a millisecond in a minute.
REFRESH_SECONDS = 60.0
# After a failed reading, the next attempt waits this long (the database may be restarting).
RETRY_SECONDS = 5.0


class Clock(Protocol):
    """What ``use()`` installs: anything that tells the time."""

    def now(self) -> datetime: ...


class ClockUnavailable(DatabaseError):
    """The database's clock has not been read yet, and the last attempt to read it failed."""


class SystemClock:
    """This machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


# The statement that reads the server's clock, by vendor; CURRENT_TIMESTAMP elsewhere.
_READ_CLOCK = {
    # clock_timestamp(): the time now, not the transaction's start (now(), CURRENT_TIMESTAMP).
    "postgresql": "SELECT clock_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
    "oracle": "SELECT SYSTIMESTAMP FROM DUAL",
}


class DatabaseClock:
    """The database server's clock, read now and then and carried forward by the monotonic clock."""

    def __init__(self, alias: str | None = None):
        self._alias = alias
        self._lock = threading.Lock()
        self._local: bool | None = None  # True when the database's clock is this machine's (SQLite)
        self._base: datetime | None = None  # the server's time at the monotonic instant _read_at
        self._read_at = 0.0
        self._next_reading = 0.0
        self._failure: str | None = None  # why the last reading failed

    def now(self) -> datetime:
        moment = time.monotonic()
        if moment >= self._next_reading:
            self._refresh(moment, wait=self._base is None)
        base = self._base
        if base is None:
            if self._local:
                return datetime.now(UTC)
            raise ClockUnavailable(
                f"The database's clock has not been read yet ({self._failure or 'another thread is reading it'}); "
                f"it is read again within {RETRY_SECONDS:.0f} s. Leases and wake times are kept on that "
                "clock, so nothing is written until it is read."
            )
        return base + timedelta(seconds=time.monotonic() - self._read_at)

    def forget(self) -> None:
        """Read the clock again at the next ``now()`` (another database, in tests)."""
        with self._lock:
            self._local, self._base, self._next_reading, self._failure = None, None, 0.0, None

    def _refresh(self, moment: float, wait: bool) -> None:
        # Once a reading exists, one thread reads again and the others go on with the last reading
        # rather than queue behind a database that may be slow to answer. Before the first, there is
        # nothing to go on with: they wait for the thread that reads.
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if moment < self._next_reading:
                return  # another thread read it (or failed to, and the retry is not due) meanwhile
            if self._local is None:
                self._local = self._connection_vendor() == "sqlite"
            if self._local:
                self._next_reading = float("inf")
                return
            try:
                self._read()
            except Exception as exc:
                self._next_reading = time.monotonic() + RETRY_SECONDS
                self._failure = f"{type(exc).__name__}: {exc}".strip()
                logger.warning("could not read the database's clock (%s); %s", self._failure,
                               "going on with the last reading" if self._base else "nothing is written until it is read")
            else:
                self._failure = None
                self._next_reading = self._read_at + REFRESH_SECONDS
        finally:
            self._lock.release()

    def _database(self):
        from django.db import connections, router

        from django_workflows.models import Instance

        return connections[self._alias or router.db_for_write(Instance)]

    def _connection_vendor(self) -> str:
        return self._database().vendor

    def _read(self) -> None:
        # A connection of the clock's own, opened and closed for each reading (once a minute): the
        # thread's own connection may be inside a caller's transaction, or counted by a test.
        wrapper = self._database().copy()
        try:
            with wrapper.cursor() as cursor:
                before = time.monotonic()
                cursor.execute(_READ_CLOCK.get(wrapper.vendor, "SELECT CURRENT_TIMESTAMP"))
                after = time.monotonic()
                (server_time,) = cursor.fetchone()
        finally:
            wrapper.close()
        if isinstance(server_time, str):
            server_time = datetime.fromisoformat(server_time)
        if server_time.tzinfo is None:
            server_time = server_time.replace(tzinfo=UTC)
        # The server read its clock somewhere between before and after: take the middle.
        self._base, self._read_at = server_time.astimezone(UTC), (before + after) / 2


database_clock = DatabaseClock()
# A child forked while another thread held the lock would never read the clock again.
os.register_at_fork(after_in_child=lambda: setattr(database_clock, "_lock", threading.Lock()))
_clock: Clock = database_clock
now: Callable[[], datetime] = _clock.now
"""The installed clock's time: its ``now`` itself, which ``use`` binds anew, not a function that calls it
(a step reads the clock twice)."""


def use(clock: Clock) -> Clock:
    """Install ``clock`` and return the one it replaces."""
    global _clock, now
    previous, _clock = _clock, clock
    now = clock.now
    return previous
