"""The attempt watchdog: deadlines fire, finished attempts neither pile up nor wake its thread, and an
attempt that ends as its deadline fires leaves no watch armed."""

import os
import random
import select
import signal
import sys
import threading
import time
import weakref

import pytest

from django_workflows.engine import timeouts
from django_workflows.foundations.control_flow import AttemptTimedOut
from django_workflows.engine.timeouts import Watchdog, call_with_timeout, watchdog
from tests.interruptions import disarmed_on_exit, held_at, interruptions_within, watches_left_armed


def test_an_attempt_past_its_deadline_is_interrupted():
    with pytest.raises(AttemptTimedOut):
        call_with_timeout(lambda: time.sleep(0.5) or [n for n in range(10**8)], 0.2)


def test_an_attempt_that_swallows_the_interruption_is_still_failed():
    def stubborn():
        deadline = time.monotonic() + 0.4
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except AttemptTimedOut:
                pass
        return "done"

    with pytest.raises(AttemptTimedOut):
        call_with_timeout(stubborn, 0.1)


def test_an_attempt_that_swallows_the_interruption_and_goes_on_is_interrupted_again():
    swallowed, outcome = [], []

    def stubborn_loop():
        while True:
            try:
                while True:
                    time.sleep(0.01)
            except AttemptTimedOut:
                if swallowed:
                    raise
                swallowed.append(time.monotonic())

    def attempt():
        try:
            call_with_timeout(stubborn_loop, 0.1)
        except AttemptTimedOut:
            outcome.append(time.monotonic())

    # In a thread of its own: without a second interruption it would loop for ever.
    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(10)
    assert swallowed and outcome, "the attempt was never interrupted again"
    assert outcome[0] - swallowed[0] >= 0.9


def test_an_interruption_dropped_in_a_finalizer_is_raised_again_at_once(monkeypatch):
    """Python cannot raise out of a finalizer: an interruption that lands in one (here a weakref
    callback the attempt's own `del` runs) is dropped and reported as unraisable. It is raised again
    as the finalizer returns, not a round later (a minute, here), and nothing is reported."""
    monkeypatch.setattr(timeouts, "INTERRUPT_AGAIN_AFTER", 60.0)
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    finalized, outcome = [], []

    def slow_finalizer():
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            pass

    def attempt_body():
        class Resource:
            pass

        resource = Resource()
        weakref.finalize(resource, slow_finalizer)
        del resource  # the finalizer runs now, and the interruption, due in 0.1 s, lands in it
        finalized.append(time.monotonic())
        while True:
            pass

    def attempt():
        try:
            call_with_timeout(attempt_body, 0.1)
        except AttemptTimedOut:
            outcome.append(time.monotonic())

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(20)
    assert finalized and outcome, "the interruption dropped in the finalizer was not raised again"
    assert outcome[0] - finalized[0] < 5
    assert reported == []


def test_finished_attempts_do_not_pile_up_in_the_heap():
    for _ in range(5000):
        assert call_with_timeout(lambda: 1, 600) == 1
    # Dropped lazily once they are most of the heap, not kept for their 10 minutes.
    assert len(watchdog._heap) <= 200


def test_a_short_deadline_after_many_long_ones_still_fires():
    dog = Watchdog()
    long_ones = [dog.watch(600) for _ in range(100)]
    for entry in long_ones:
        dog.unwatch(entry)
    short = dog.watch(0.05)
    with pytest.raises(AttemptTimedOut):
        time.sleep(0.3)
    dog.unwatch(short)
    assert short.fired


def test_watching_with_the_usual_timeout_does_not_wake_the_thread(monkeypatch):
    dog = Watchdog()
    notified = []
    notify = dog._wakeup.notify
    monkeypatch.setattr(dog._wakeup, "notify", lambda *args: notified.append(args) or notify(*args))
    for _ in range(50):
        dog.unwatch(dog.watch(600))
        time.sleep(0.002)  # time for the thread to run between attempts, as between steps
    # Only the first watch woke it: it then sleeps until that deadline, later ones are no earlier.
    assert len(notified) == 1


def test_200_attempts_ending_within_a_millisecond_of_their_timeout_leave_no_watch_armed():
    """Each body ends within a millisecond either side of its 5 ms timeout, its last millisecond spent
    in one C call with no check for an interruption in it (a scan of a list here; a driver's call or a
    big computation in a real step). When the watchdog wakes during that call, its interruption lands
    at the first check after it: where the attempt's watch is being ended. Whether the attempt then
    counts as timed out depends on which side of its deadline it ended; either way its watch must end,
    or it interrupts the thread again every second in whatever it does next."""
    haystack = list(range(100_000))
    per_item = min(_time(lambda: -1 in haystack) for _ in range(5)) / len(haystack)
    haystack = list(range(int(0.001 / per_item)))  # scanned in about a millisecond
    timeout = 0.005
    outcomes = {"returned": 0, "timed out": 0}

    def ending_at(moment):
        def body():
            while time.monotonic() < moment - 0.001:
                pass
            return -1 in haystack

        return body

    with disarmed_on_exit():
        for _ in range(200):
            ends_at = time.monotonic() + timeout + random.uniform(-0.001, 0.001)
            try:
                call_with_timeout(ending_at(ends_at), timeout)
                outcomes["returned"] += 1
            except AttemptTimedOut:
                outcomes["timed out"] += 1
        left = watches_left_armed()
        interruptions = interruptions_within(1.5)

    assert left == []
    assert interruptions == 0
    # Both sides of the deadline were tried (about half each).
    assert outcomes["returned"] and outcomes["timed out"], outcomes


def test_an_attempt_held_as_its_watch_is_ended_while_its_deadline_passes_is_timed_out_once():
    """The body returned before its deadline, and the thread let the GIL go as it went to end the
    watch (at the check as unwatch starts, where the scheduler may make it let go), until past the
    deadline. The attempt ran too long: it is a timeout. Its watch ends with it, interrupting nothing
    after it."""
    with disarmed_on_exit():
        with held_at("unwatch", "start", seconds=0.3):
            with pytest.raises(AttemptTimedOut):
                call_with_timeout(lambda: "done", 0.05)
        left = watches_left_armed()
        interruptions = interruptions_within(1.5)
    assert left == []
    assert interruptions == 0


def test_an_interruption_landing_as_the_watch_is_armed_times_the_attempt_out_once():
    """The deadline passes before the body begins, and the interruption lands as the watch has just
    been armed. The attempt is a timeout, and its watch ends with it."""
    with disarmed_on_exit():
        with held_at("watch", "return", seconds=5) as landed:
            with pytest.raises(AttemptTimedOut):
                call_with_timeout(lambda: "done", 0.05)
        left = watches_left_armed()
        interruptions = interruptions_within(1.5)
    assert landed, "the interruption did not land where the thread was held"
    assert left == []
    assert interruptions == 0


def _time(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def test_a_process_whose_attempt_swallowed_its_interruption_can_still_be_profiled():
    """An attempt that caught its interruption and returned has its watch ended with the interruption
    dropped, not withdrawn: on CPython 3.11, withdrawing leaves the interpreter's flag of pending work
    set, and the process then hangs at the next call under a profile or trace function (a profiler, a
    debugger, coverage). A process of its own, so that a hang is a timeout here, not the suite's."""
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from django_workflows.foundations.control_flow import AttemptTimedOut\n"
        "from django_workflows.engine.timeouts import call_with_timeout\n"
        "def swallows():\n"
        "    try:\n"
        "        while True:\n"
        "            pass\n"
        "    except AttemptTimedOut:\n"
        "        return 'swallowed'\n"
        "try:\n"
        "    call_with_timeout(swallows, 0.01)\n"
        "except AttemptTimedOut:\n"
        "    pass\n"
        "def called():\n"
        "    return 1\n"
        "sys.setprofile(lambda *args: None)\n"
        "called()\n"
        "sys.setprofile(None)\n"
        "sys.settrace(lambda *args: None)\n"
        "called()\n"
        "sys.settrace(None)\n"
        "print('profiled')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"})
    assert done.stdout.strip() == "profiled", done.stderr[-2000:]


def _child_outcome(parent_thread) -> bytes:
    """Fork; in the child, run an attempt past its timeout and report how it ended; return the report
    (b"hung" if the child said nothing within 10 s, and was killed)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether its attempt was interrupted, and leave at once
        try:
            call_with_timeout(lambda: time.sleep(2), 0.1)
            outcome = b"ran on"
        except AttemptTimedOut:
            outcome = b"interrupted" if watchdog._thread is not parent_thread else b"parent's thread"
        except BaseException:
            outcome = b"failed"
        os.write(write, outcome)
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 10)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as child:
        return child.read() if ready else b"hung"


def test_a_forked_child_starts_a_watchdog_of_its_own():
    # The parent's watchdog thread exists; a child forked from it has no threads but the one that forked,
    # so its first watch must start one, or its attempts would run past their timeouts unwatched.
    assert call_with_timeout(lambda: 1, 600) == 1
    parent_thread = watchdog._thread
    assert parent_thread is not None and parent_thread.is_alive()
    assert _child_outcome(parent_thread) == b"interrupted"


def test_a_child_forked_while_the_watchdog_lock_is_held_can_still_watch():
    # Another thread holds the lock as the fork happens (the watchdog's own thread does while it files an
    # interruption): the child, where nothing would ever let it go, watches with a lock of its own.
    assert call_with_timeout(lambda: 1, 600) == 1
    parent_thread = watchdog._thread
    holding, release = threading.Event(), threading.Event()

    def hold():
        with watchdog._lock:
            holding.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    try:
        outcome = _child_outcome(parent_thread)
    finally:
        release.set()
        holder.join()
    assert outcome == b"interrupted"
