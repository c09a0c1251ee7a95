"""The parts of deadlines and continue-as-new that need no database: a timeout's parsing, the wake time
an instance stores, the ids of a family, and how a replay that continued as new ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_workflows.shared import deadlines, families
from django_workflows.foundations.control_flow import ContinueAsNew, Suspend, Terminating
from django_workflows.engine.replay_outcome import Ending, decide
from django_workflows.errors import InvalidParams, NonDeterminismError
from django_workflows.foundations.validation import INSTANCE_ID_PATTERN, MAX_INSTANCE_ID, validate_existing_instance_id

NOON = datetime(2026, 3, 2, 12, tzinfo=UTC)


@pytest.mark.parametrize("value, expected", [("7 days", timedelta(days=7)), (1500, timedelta(seconds=1.5)),
                                             (timedelta(hours=2), timedelta(hours=2)), ("3650 days", timedelta(days=3650))])
def test_a_timeout_is_a_duration_above_zero_up_to_ten_years(value, expected):
    assert deadlines.parse_timeout(value, "timeout") == expected


@pytest.mark.parametrize("value, said", [(0, "more than zero"), ("3651 days", "at most 3650 days"),
                                         ("1e400 years", "cannot parse"), ("9" * 30 + " years", "at most"),
                                         (None, "expected milliseconds"), (False, "expected milliseconds")])
def test_a_timeout_it_cannot_take_says_what_was_wrong(value, said):
    with pytest.raises(InvalidParams, match=said):
        deadlines.parse_timeout(value, "timeout")


def test_the_wake_time_is_the_earlier_of_its_own_and_the_deadline():
    later = NOON + timedelta(days=1)
    assert deadlines.earliest(later, NOON) == NOON
    assert deadlines.earliest(NOON, later) == NOON
    assert deadlines.earliest(None, NOON) == NOON  # a wait for an event without a timeout
    assert deadlines.earliest(later, None) == later
    assert deadlines.deadline_after(NOON, None) is None
    assert deadlines.deadline_after(NOON, timedelta(days=7)) == NOON + timedelta(days=7)
    assert deadlines.passed(NOON, NOON) and not deadlines.passed(later, NOON) and not deadlines.passed(None, NOON)


def test_a_familys_ids_follow_its_first():
    assert families.successor_id("order-7") == "order-7~2"
    assert families.successor_id("order-7~2") == "order-7~3"
    assert families.successor_id("order-7~99") == "order-7~100"
    assert [families.generation(i) for i in ("order-7", "order-7~2", "order-7~100", "x-9")] == [1, 2, 100, 1]


def test_a_long_first_id_is_shortened_with_its_digest_and_stays_apart_from_one_alike():
    first, alike = "a" * 99 + "b", "a" * 99 + "c"
    ids = [first]
    for _ in range(1, 1200):
        ids.append(families.successor_id(ids[-1]))
    assert all(len(member) <= MAX_INSTANCE_ID for member in ids)
    assert len(set(ids)) == len(ids)
    assert [families.generation(member) for member in ids[:3]] == [1, 2, 3]
    assert families.generation(ids[-1]) == 1200
    assert families.successor_id(first) != families.successor_id(alike)
    for member in ids:
        # Never an id a caller could create; always one the API looks up.
        assert member == first or not INSTANCE_ID_PATTERN.fullmatch(member)
        assert validate_existing_instance_id(member) == member


def test_a_continuation_ends_the_replay_even_when_run_swallowed_it():
    continued = ContinueAsNew({"n": 2})
    for raised, output in ((continued, None), (None, "went on"), (ValueError("after"), None)):
        ended = decide(raised, output, fatal=None, suspended=None, terminating=False, undos_remembered=False,
                       continued=continued)
        assert (ended.ending, ended.value) == (Ending.CONTINUE, continued)


def test_a_fatal_error_or_a_stop_wins_over_a_continuation():
    continued = ContinueAsNew({})
    fatal = NonDeterminismError("moved")
    assert decide(continued, None, fatal=fatal, suspended=None, terminating=False, undos_remembered=False,
                  continued=continued).ending is Ending.ERROR
    assert decide(continued, None, fatal=None, suspended=None, terminating=True, undos_remembered=True,
                  continued=continued).ending is Ending.TERMINATE
    assert decide(Terminating(), None, fatal=None, suspended=None, terminating=True, undos_remembered=False,
                  continued=continued).ending is Ending.TERMINATE
    assert decide(Suspend(wake_at=NOON), None, fatal=None, suspended=None, terminating=False,
                  undos_remembered=False).ending is Ending.SUSPEND
