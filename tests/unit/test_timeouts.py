"""The attempt watchdog: deadlines fire, and finished attempts neither pile up nor wake its thread."""

import sys
import threading
import time
import weakref

import pytest

from django_workflows import timeouts
from django_workflows.control_flow import AttemptTimedOut
from django_workflows.timeouts import Watchdog, call_with_timeout, watchdog


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
