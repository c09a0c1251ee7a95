"""What a journal row's values become: the attempts as JSON text, written directly for the shapes the
engine journals and exactly as ``json.dumps`` writes them; and the step names found valid, remembered."""

import json
from datetime import datetime, timedelta, timezone

import pytest

from django_workflows.engine.step_host import Attempt
from django_workflows.errors import InvalidStepInput
from django_workflows.foundations import validation
from django_workflows.shared import iso_times
from django_workflows.store import journal_values
from django_workflows.store.journal_values import attempts_json as _attempts_json


def _attempt(cpu: float, wall: float, failure=None, microsecond=123456) -> Attempt:
    started = datetime(2026, 12, 6, 17, 0, 48, microsecond, tzinfo=timezone.utc)
    return Attempt(started, started + timedelta(milliseconds=wall), "1", 1, failure, cpu / 1000, wall / 1000, 1)


@pytest.mark.parametrize("attempts", [
    [],
    [_attempt(0.001, 0.004).journaled(1)],
    # isoformat leaves the microseconds out when they are 0
    [_attempt(0.0, 2.0, microsecond=0).journaled(1)],
    [_attempt(1e-06, 86_400_000.0, failure=ValueError("x")).journaled(1), _attempt(12.5, 3.25).journaled(2)],
    # numbers whose repr has an exponent
    [{**_attempt(0.1, 0.2).journaled(1), "cpu_ms": 1e+22, "wall_ms": 5e-324}],
])
def test_the_attempts_the_engine_journals_are_written_as_json_dumps_writes_them(attempts, monkeypatch):
    expected = json.dumps(attempts)
    # Written directly, never by json.dumps: the shape Attempt.journaled makes is the one the fast path knows.
    monkeypatch.setattr(journal_values.json, "dumps", None)
    assert _attempts_json(attempts) == expected
    assert json.loads(_attempts_json(attempts)) == attempts


@pytest.mark.parametrize("attempts", [
    # an attempt with its error, as run_do adds it to a failed one
    [{**_attempt(0.1, 0.2).journaled(1), "error": {"name": "ValueError", "message": 'a "quoted" \n message'}}],
    # an attempt journaled by an earlier release, without the times it now measures
    [{"attempt": 1, "start": "2026-12-06T17:00:48+00:00", "end": "2026-12-06T17:00:49+00:00", "success": True}],
    # text that would need escaping where a time stands
    [{**_attempt(0.1, 0.2).journaled(1), "start": 'not "a" time'}],
    [{**_attempt(0.1, 0.2).journaled(1), "cpu_ms": 1}],
    ({"not": "a list"}),
])
def test_any_other_shape_is_left_to_json_dumps(attempts):
    assert _attempts_json(attempts) == json.dumps(attempts)


def test_a_valid_step_name_is_checked_once_and_an_invalid_one_every_time(monkeypatch):
    monkeypatch.setattr(validation, "_VALID_STEP_NAMES", set())
    assert validation.validate_step_name("charge the card") == "charge the card"
    assert validation._VALID_STEP_NAMES == {"charge the card"}
    for bad in ("tab\there", "", "x" * 257, 42, ["a list"]):
        with pytest.raises(InvalidStepInput):
            validation.validate_step_name(bad)
        with pytest.raises(InvalidStepInput):
            validation.validate_step_name(bad)
    assert validation._VALID_STEP_NAMES == {"charge the card"}


def test_the_valid_names_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(validation, "_VALID_STEP_NAMES", set())
    monkeypatch.setattr(validation, "_VALID_STEP_NAMES_KEPT", 3)
    for n in range(10):
        assert validation.validate_step_name(f"order {n}") == f"order {n}"
    assert len(validation._VALID_STEP_NAMES) == 3


class _CountingMoment(datetime):
    """A datetime that notes each time it is formatted."""

    formatted: list = []

    def isoformat(self, *args, **kwargs):
        self.formatted.append(self)
        return super().isoformat(*args, **kwargs)


@pytest.mark.parametrize("microsecond", [0, 7, 123456])
def test_a_moment_is_formatted_once_for_its_attempt_and_its_column(microsecond):
    formatted = _CountingMoment.formatted = []
    start, end = (2026, 12, 7, 4, 33, 10, microsecond), (2026, 12, 7, 4, 33, 11, 5)
    started, ended = (_CountingMoment(*at, tzinfo=timezone.utc) for at in (start, end))
    plain_started, plain_ended = (datetime(*at, tzinfo=timezone.utc) for at in (start, end))
    attempt = Attempt(started, ended, "1", 1, None, 0.0, 0.0, 1).journaled(1)
    assert (attempt["start"], attempt["end"]) == (plain_started.isoformat(), plain_ended.isoformat())
    assert formatted == [started, ended]
    # The columns' text (SQLite's, in UTC) is cut from the attempt's: neither moment is formatted again.
    assert iso_times.naive_utc_text(started) == str(plain_started.replace(tzinfo=None))
    assert iso_times.naive_utc_text(ended) == str(plain_ended.replace(tzinfo=None))
    assert formatted == [started, ended]
    # An equal moment that is another object is formatted afresh, to the same text.
    again = _CountingMoment(*start, tzinfo=timezone.utc)
    assert iso_times.naive_utc_text(again) == str(plain_started.replace(tzinfo=None))
    assert formatted == [started, ended, again]
