"""Per-attempt step timeouts without ``signal.alarm``, and what an interrupted attempt leaves behind.

django-q2 owns SIGALRM for its own task timeout, so an attempt's deadline is
watched by one daemon thread per process. When a deadline passes while the
attempt still runs, the watchdog raises ``AttemptTimedOut`` asynchronously in
the thread running it (``PyThreadState_SetAsyncExc``). That interrupts Python
code at the next bytecode; code blocked inside C (a socket read with no
timeout, ``time.sleep``) is interrupted when it returns to Python. Either way
the engine also measures the attempt and fails it as timed out if it ran too
long, even if the user's code swallowed the interruption.

The body runs in the replay's own thread: handing each attempt to another
thread would cost every step two context switches, and a body abandoned in a
thread of its own would go on with its side effects. So the interruption can
land anywhere in the body, including inside Django's or the driver's code: after
a BEGIN and before Django notes it, halfway through a query's exchange with the
server, inside a COMMIT. The connection is then in a state Django does not know
of (a transaction open under a wrapper that believes it is in autocommit, a
result half read), and the journal, which writes on that same connection right
after the attempt, would inherit it: its rows left uncommitted under SQLite's
write lock, or "another command is already in progress" on PostgreSQL.

Deferring the interruption while a query runs cannot prevent that: the
exception is raised at the thread's next check, by which time it may have
entered Django's transaction code, and a body that spends its time in queries
would never be interrupted at all. Instead, the interruption is confined to the
attempt, and the attempt's connections end with it:

- It can arrive only between ``watch()`` and ``unwatch()``: ``unwatch`` withdraws
  an interruption fired but not yet raised, under the watchdog's lock, and the
  engine makes no database call in between (a step called from inside a step's
  body errors the instance instead of writing the journal). Ending a watch is
  itself Python code that the interruption can land in, on its way in or halfway
  through: ``call_with_timeout`` marks the watch done before the first point
  where it could, and ends it again if it lands there (see ``call_with_timeout``).
- An attempt whose watch fired is a timeout, whatever it raised or returned
  afterwards: Django's ``Atomic.__exit__`` failing on the broken connection, or a
  bare ``except:`` that swallowed the interruption.
- Before anything else uses the database, every connection of the thread that
  the interrupted code may have touched is discarded (``discard_connections``, in
  ``engine.interrupted_connections``):
  its transaction is rolled back and the driver's connection closed, which ends
  the attempt's locks with it, and Django's wrapper is reset so that the next
  statement opens a new connection. Only the attempt's uncommitted work is lost,
  as it would be had its process died.

An interruption that lands in a finalizer (a ``__del__`` or a weakref callback that
the collector runs in the attempt's thread) cannot leave it: Python reports it as
unraisable and drops it. The watchdog's hook on ``sys.unraisablehook`` recognises
it and raises it again in that thread, where it arrives once the finalizer
returns, instead of reporting it.

A connection that was already inside an atomic block when the attempt began
belongs to the caller's transaction (a test's, or ``run_due()`` called inside a
request's): ending it is not ours to do, so it is left as it is, and what the
interrupted code did inside it is the caller's to roll back.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper

from django_workflows.engine.interrupted_connections import callers_transactions, discard_connections
from django_workflows.foundations.control_flow import AttemptTimedOut

T = TypeVar("T")
# sys.unraisablehook's type: what Python calls with an exception it cannot raise (one in a finalizer).
UnraisableHook = Callable[["sys.UnraisableHookArgs"], object]


def _set_async_exc(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc_type))


def _a_check() -> None:
    """Nothing: the interpreter looks for a pending asynchronous exception as a function starts."""


def _drop_a_pending_interruption() -> None:
    """In the attempt's thread, once its watch is done: an interruption fired but not yet raised is raised
    here, at a check made for it, and dropped.

    Not withdrawn with ``PyThreadState_SetAsyncExc(id, NULL)``: on CPython 3.11 that leaves the
    interpreter's flag of pending work set for good, and the next profile or trace function set in the
    process (a profiler, a debugger, coverage) then spins for ever at the next function call."""
    try:
        _a_check()
    except AttemptTimedOut:
        pass


# Seconds between two interruptions of an attempt that has not ended after the first.
INTERRUPT_AGAIN_AFTER = 1.0
# Seconds before an interruption that a finalizer dropped is raised again: time for it to return.
RAISE_LOST_AGAIN_AFTER = 0.01


class _Watch:
    """One attempt's watch, in the thread that runs it. ``done``: the attempt has ended and must not be
    interrupted any more; ``fired``: it was interrupted at least once."""

    __slots__ = ("deadline", "thread_id", "done", "fired")

    def __init__(self) -> None:
        self.deadline = math.inf  # until watched
        self.thread_id = threading.get_ident()
        self.done = False
        self.fired = False


class Watchdog:
    """One thread that sleeps until the earliest deadline of the attempts it watches.

    Watching an attempt wakes the thread only when the attempt's deadline is
    earlier than the one it sleeps until, which is rare: attempts mostly share
    one timeout, so a step costs no context switch. Finished attempts are left in
    the heap until their deadline, or dropped all at once when they are most of it.
    """

    def __init__(self) -> None:
        # The attempts interrupted at least once and not yet unwatched, by thread.
        self._fired: dict[int, _Watch] = {}
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, _Watch]] = []
        self._finished = 0
        self._sleeping_until = math.inf
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        # Called under the lock at every watch: ``is_alive()`` is two calls and a lock of its own, so the
        # thread says itself when it is gone (its loop ending, a forked child that has none).
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="django-workflows-watchdog", daemon=True)
            self._thread.start()

    def _after_fork_in_child(self) -> None:
        # The child has only the thread that forked: no watchdog thread, and a lock the parent's thread
        # may have held at the fork, which nothing in the child would ever let go.
        self._thread = None
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)

    def watch(self, seconds: float, entry: _Watch | None = None) -> _Watch:
        """Interrupt this thread in ``seconds`` unless ``unwatch`` comes first. ``entry`` is a watch made
        beforehand, by a caller that must hold it before it can fire (``call_with_timeout``)."""
        if not getattr(sys.unraisablehook, "raises_lost_interruptions_again", False):
            sys.unraisablehook = _raising_lost_interruptions_again(sys.unraisablehook)
        if entry is None:
            entry = _Watch()
        entry.deadline = time.monotonic() + seconds
        with self._lock:
            self._ensure_thread()
            heapq.heappush(self._heap, (entry.deadline, next(self._counter), entry))
            if entry.deadline < self._sleeping_until:
                self._sleeping_until = entry.deadline
                self._wakeup.notify()
        return entry

    def unwatch(self, entry: _Watch) -> None:
        """End a watch: it fires no more, and an interruption fired but not yet raised is withdrawn.

        The interruption can land in here, before the lock is taken or in the call that withdraws it:
        this then raises it unfinished, and calling it again finishes. ``call_with_timeout`` does, having
        marked the watch done beforehand, so that nothing can interrupt the second call."""
        with self._lock:
            entry.done = True
            if entry.fired:
                # Forgotten before the withdrawal, which is a call, and a place the interruption can
                # still land in: a second unwatch then finds nothing left to do but the withdrawal.
                if self._fired.get(entry.thread_id) is entry:
                    del self._fired[entry.thread_id]
                # The interruption may still be pending in this thread: let it land, and drop it.
                _drop_a_pending_interruption()
                return
            self._finished += 1
            if self._finished > 64 and self._finished * 2 > len(self._heap):
                self._heap = [item for item in self._heap if not item[2].done]
                heapq.heapify(self._heap)
                self._finished = 0

    def _loop(self) -> None:
        with self._lock:
            try:
                self._watch_deadlines()
            finally:
                # Never expected: the next watch() starts another thread.
                self._thread = None

    def _watch_deadlines(self) -> None:
        # Called with the lock held.
        while True:
            if not self._heap:
                self._sleeping_until = math.inf
                self._wakeup.wait()
                continue
            deadline, _, entry = self._heap[0]
            delay = deadline - time.monotonic()
            if delay > 0:
                # Even when that attempt has finished: sleeping until its deadline rather than
                # for ever spares the next watch() a wake-up.
                self._sleeping_until = deadline
                self._wakeup.wait(delay)
                continue
            heapq.heappop(self._heap)
            if entry.done:
                self._finished = max(self._finished - 1, 0)
                continue
            entry.fired = True
            self._fired[entry.thread_id] = entry
            _set_async_exc(entry.thread_id, AttemptTimedOut)
            # Until the attempt ends, the interruption is raised again now and then: code that
            # swallowed it (a bare except: in a loop), or a library that lost it on its way out of
            # C, would otherwise hold the worker for ever.
            heapq.heappush(self._heap, (time.monotonic() + INTERRUPT_AGAIN_AFTER, next(self._counter), entry))


    def raise_again_if_lost(self, exc_type: object) -> bool:
        """Called in the thread where an exception of ``exc_type`` was dropped: if it was this
        thread's attempt's interruption, have it raised again in a moment and say so. Not at once:
        raised now, it would land in the hook that called this, and be dropped again."""
        if not (isinstance(exc_type, type) and issubclass(exc_type, AttemptTimedOut)):
            return False
        entry = self._fired.get(threading.get_ident())
        if entry is None or entry.done:
            return False
        if not self._lock.acquire(timeout=1.0):
            return False
        try:
            again = time.monotonic() + RAISE_LOST_AGAIN_AFTER
            heapq.heappush(self._heap, (again, next(self._counter), entry))
            if again < self._sleeping_until:
                self._sleeping_until = again
                self._wakeup.notify()
        finally:
            self._lock.release()
        return True


watchdog = Watchdog()
# A forked child has none of its parent's threads: its first watch() starts a watchdog of its own.
os.register_at_fork(after_in_child=watchdog._after_fork_in_child)


def _raising_lost_interruptions_again(report: UnraisableHook) -> UnraisableHook:
    """``sys.unraisablehook`` over ``report``: an attempt's interruption dropped in a finalizer is raised
    again rather than reported; everything else is reported as before."""
    def hook(unraisable: sys.UnraisableHookArgs) -> None:
        if not watchdog.raise_again_if_lost(unraisable.exc_type):
            report(unraisable)

    hook.raises_lost_interruptions_again = True  # type: ignore[attr-defined]  # the mark the watchdog looks for
    return hook


def call_with_timeout(fn: Callable[[], T], seconds: float, journal: BaseDatabaseWrapper | None = None,
                      callers: tuple[BaseDatabaseWrapper, ...] | None = None) -> T:
    """Call ``fn()``; raise ``AttemptTimedOut`` if it runs longer than ``seconds``.

    Whether it returns or raises, no interruption is pending any more, and if ``fn`` was interrupted,
    the connections it may have left mid-transaction were discarded: the caller may use the database
    at once. ``journal`` is the caller's own connection, if it has one (see ``callers_transactions``);
    ``callers``, the transactions to keep, when the caller asked before opening one of its own (an
    atomic step's, which an interruption ends like any of the attempt's).
    """
    if callers is None:
        callers = callers_transactions(journal)
    started = time.monotonic()
    # The interruption is raised at one of the interpreter's checks for a pending exception: as a
    # function starts, after a call returns, at a loop's jump back. watch() passes some after its
    # lock is let go, so the watch is armed inside the try: wherever it lands, the finally ends it.
    entry = _Watch()
    try:
        try:
            watchdog.watch(seconds, entry)
            result = fn()
        finally:
            # First, before any call: from the body's end (its return, its exception, or the
            # interruption landing in it or as it returns) to this store there is no check, so the
            # store is always made, and the watchdog, which looks at ``done`` under its lock before
            # firing, fires no more. An interruption it fired just before can still land at the checks
            # in unwatch(), as unwatch starts (before the lock is taken) or halfway through: unwatch
            # then raises it unfinished, and unwatching again finishes; nothing can interrupt that one,
            # with the watch done and its one pending interruption spent. Left unfinished, the watch
            # would stay armed and interrupt this thread every INTERRUPT_AGAIN_AFTER seconds, in
            # whatever it did next: the journal's INSERT, the next replay.
            entry.done = True
            try:
                watchdog.unwatch(entry)
            except AttemptTimedOut:
                watchdog.unwatch(entry)
                raise  # the attempt timed out: its watch had fired
    except BaseException as exc:
        if not entry.fired:
            raise
        # Whatever the interrupted code raised on its way out (a DatabaseError from a rollback on
        # the broken connection, say) is a consequence of the timeout.
        discard_connections(keep=callers)
        if isinstance(exc, AttemptTimedOut):
            raise
        raise AttemptTimedOut() from exc
    if entry.fired:
        # Interrupted, and it swallowed the interruption: it may have done so halfway through a
        # database call, so its connections are no more to be trusted than if it had not.
        discard_connections(keep=callers)
        raise AttemptTimedOut()
    if time.monotonic() - started > seconds:
        raise AttemptTimedOut()
    return result
