"""How a replay ends, decided from how run() ended and what its steps noted: the rules alone."""

from datetime import UTC, datetime

import pytest

from django_workflows.foundations.control_flow import Suspend, Terminating
from django_workflows.errors import NonDeterminismError
from django_workflows.engine.replay_outcome import Ending, decide

WAKE = datetime(2026, 1, 5, 9, tzinfo=UTC)


def outcome(raised=None, output=None, fatal=None, suspended=None, terminating=False, undos=False):
    return decide(raised, output, fatal=fatal, suspended=suspended, terminating=terminating,
                  undos_remembered=undos)


def failure():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        return exc


def test_run_returned_completes_with_its_output():
    ended = outcome(output={"ok": 1})
    assert (ended.ending, ended.value) == (Ending.COMPLETE, {"ok": 1})


def test_a_suspension_raised_through_run_suspends():
    sleep = Suspend(step_key="nap-1", wake_at=WAKE)
    ended = outcome(raised=sleep, suspended=sleep)
    assert (ended.ending, ended.value) == (Ending.SUSPEND, sleep)


@pytest.mark.parametrize("raised", [None, "failure", "suspend"])
def test_a_fatal_error_errors_the_instance_whatever_run_did(raised):
    fatal = NonDeterminismError("moved")
    exc = {None: None, "failure": failure(), "suspend": Suspend(step_key="x-1")}[raised]
    ended = outcome(raised=exc, fatal=fatal, suspended=Suspend(step_key="x-1"), undos=True)
    assert (ended.ending, ended.value) == (Ending.ERROR, fatal)


def test_a_swallowed_suspension_wins_over_what_run_did_after():
    sleep = Suspend(step_key="nap-1", wake_at=WAKE)
    assert outcome(output=1, suspended=sleep).value is sleep
    assert outcome(raised=failure(), suspended=sleep).ending is Ending.SUSPEND


def test_a_failure_with_undos_remembered_rolls_back_with_its_traceback():
    exc = failure()
    ended = outcome(raised=exc, undos=True)
    assert (ended.ending, ended.value) == (Ending.ROLL_BACK, exc)
    assert "ValueError: boom" in ended.traceback


def test_a_failure_without_undos_errors_with_its_traceback():
    ended = outcome(raised=failure())
    assert ended.ending is Ending.ERROR and "raise ValueError" in ended.traceback


def test_a_stop_asked_for_terminates():
    assert outcome(raised=Terminating(), terminating=True).ending is Ending.TERMINATE
    assert outcome(output=1, terminating=True).ending is Ending.TERMINATE
    assert outcome(raised=failure(), terminating=True, undos=True).ending is Ending.TERMINATE
