"""Per-attempt step timeouts without ``signal.alarm``.

django-q2 owns SIGALRM for its own task timeout, so an attempt's deadline is
watched by one daemon thread per process. When a deadline passes while the
attempt still runs, the watchdog raises ``AttemptTimedOut`` asynchronously in
the thread running it (``PyThreadState_SetAsyncExc``). That interrupts Python
code at the next bytecode; code blocked inside C (a socket read with no
timeout, ``time.sleep``) is interrupted when it returns to Python. Either way
the engine also measures the attempt and fails it as timed out if it ran too
long, even if the user's code swallowed the interruption.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import math
import threading
import time


def _set_async_exc(thread_id: int, exc_type) -> None:
    # ``None`` passes NULL, which withdraws a pending exception.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exc_type is None else ctypes.py_object(exc_type)
    )


class AttemptTimedOut(BaseException):
    """Raised inside an attempt that ran past its deadline. A BaseException, so
    a user's ``except Exception:`` inside the step does not swallow it."""


class _Watch:
    __slots__ = ("deadline", "thread_id", "done", "fired")

    def __init__(self, deadline: float, thread_id: int):
        self.deadline = deadline
        self.thread_id = thread_id
        self.done = False
        self.fired = False


class Watchdog:
    """One thread that sleeps until the earliest deadline of the attempts it watches.

    Watching an attempt wakes the thread only when the attempt's deadline is
    earlier than the one it sleeps until, which is rare: attempts mostly share
    one timeout, so a step costs no context switch. Finished attempts are left in
    the heap until their deadline, or dropped all at once when they are most of it.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, _Watch]] = []
        self._finished = 0
        self._sleeping_until = math.inf
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="django-workflows-watchdog", daemon=True)
            self._thread.start()

    def watch(self, seconds: float) -> _Watch:
        entry = _Watch(time.monotonic() + seconds, threading.get_ident())
        with self._lock:
            self._ensure_thread()
            heapq.heappush(self._heap, (entry.deadline, next(self._counter), entry))
            if entry.deadline < self._sleeping_until:
                self._sleeping_until = entry.deadline
                self._wakeup.notify()
        return entry

    def unwatch(self, entry: _Watch) -> None:
        with self._lock:
            entry.done = True
            if entry.fired:
                # The interruption may still be pending in this thread: withdraw it.
                _set_async_exc(entry.thread_id, None)
                return
            self._finished += 1
            if self._finished > 64 and self._finished * 2 > len(self._heap):
                self._heap = [item for item in self._heap if not item[2].done]
                heapq.heapify(self._heap)
                self._finished = 0

    def _loop(self) -> None:
        with self._lock:
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
                _set_async_exc(entry.thread_id, AttemptTimedOut)


watchdog = Watchdog()


def call_with_timeout(fn, seconds: float):
    """Call ``fn()``; raise ``AttemptTimedOut`` if it runs longer than ``seconds``."""
    entry = watchdog.watch(seconds)
    started = time.monotonic()
    try:
        try:
            result = fn()
        finally:
            watchdog.unwatch(entry)
    except AttemptTimedOut:
        raise
    if time.monotonic() - started > seconds:
        raise AttemptTimedOut()
    return result
