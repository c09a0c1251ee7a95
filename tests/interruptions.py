"""Where an attempt's interruption lands, and what it leaves armed, for the timeout tests.

The watchdog's interruption is raised in the attempt's thread at one of the interpreter's checks for
a pending exception (as a function starts, after a call returns, at a loop's jump back): the check
at which the thread let the watchdog thread have the GIL, or the next one. Which check that is
depends on when the scheduler hands the GIL over, so a test that needs it at one place holds the
thread there instead: at the start of one of the watchdog's methods, or as it returns, the thread
sleeps (the GIL let go) until an interruption lands in its sleep, as it would at the method's first
check or at the check its caller makes as the call returns.
"""

from __future__ import annotations

import contextlib
import threading
import time

from django_workflows.foundations.control_flow import AttemptTimedOut
from django_workflows.engine.timeouts import _drop_a_pending_interruption, watchdog


@contextlib.contextmanager
def held_at(method: str, where: str = "start", seconds: float = 0.5):
    """Within the block, the first time this thread calls the watchdog's ``method``, it is held at its
    ``"start"`` or as it ``"return"``s, for ``seconds`` or until an interruption lands, which then
    leaves the method as if raised at that check. Yields a list that then holds the time it landed,
    if it did."""
    original = getattr(watchdog, method)
    thread = threading.get_ident()
    landed: list[float] = []
    held: list[bool] = []

    def hold():
        held.append(True)
        until = time.monotonic() + seconds
        try:
            while time.monotonic() < until:
                time.sleep(0.001)
        except AttemptTimedOut:
            landed.append(time.monotonic())
            raise

    def method_held(*args, **kwargs):
        if held or threading.get_ident() != thread:
            return original(*args, **kwargs)
        if where == "start":
            hold()
            return original(*args, **kwargs)
        returned = original(*args, **kwargs)
        hold()
        return returned

    setattr(watchdog, method, method_held)
    try:
        yield landed
    finally:
        delattr(watchdog, method)
    assert held, f"the thread never called the watchdog's {method}()"


def watches_left_armed() -> list[str]:
    """What this thread's ended attempts left with the watchdog: a watch not done (it would fire, then
    fire again every INTERRUPT_AGAIN_AFTER seconds) or the record of one that fired."""
    me = threading.get_ident()
    left = [f"a watch not done, deadline {entry.deadline:.3f}"
            for _, _, entry in list(watchdog._heap) if entry.thread_id == me and not entry.done]
    if me in watchdog._fired:
        left.append("a watch still recorded as fired")
    return left


def interruptions_within(seconds: float) -> int:
    """How many interruptions reach this thread over the next ``seconds``, while it sleeps (a watch
    left armed interrupts it once a second)."""
    until = time.monotonic() + seconds
    arrived = 0
    while True:
        try:
            while time.monotonic() < until:
                time.sleep(0.01)
            return arrived
        except AttemptTimedOut:
            arrived += 1


@contextlib.contextmanager
def disarmed_on_exit():
    """On the way out of the block, whatever happened in it, end this thread's watches: a test that
    fails because one was left armed must not leave it interrupting the rest of the session once a
    second (inside pytest's own code, as likely as not)."""
    try:
        yield
    finally:
        me = threading.get_ident()
        with watchdog._lock:
            for _, _, entry in watchdog._heap:
                if entry.thread_id == me:
                    entry.done = True
            watchdog._fired.pop(me, None)
            _drop_a_pending_interruption()
