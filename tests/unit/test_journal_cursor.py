"""The determinism rules, on the journal cursor alone: keys, positions, kinds, the step limit and where
``step.patched`` stands. No database: the journal is built in memory."""

from datetime import UTC, datetime

import pytest

from django_workflows.errors import NonDeterminismError, StepLimitExceeded
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.store.journal import Entry

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def journal(*rows):
    """``(key, kind)`` or ``(key, kind, result)`` rows, in the order they were written."""
    return {row[0]: Entry(number, row[1], "succeeded", [], row[2] if len(row) > 2 else None, None, None, T0)
            for number, row in enumerate(rows, start=1)}


def test_a_key_is_the_name_and_how_many_times_run_called_it():
    cursor = JournalCursor(instance="w/1")
    assert [cursor.take_key(n) for n in ("charge", "ship", "charge", "charge")] == [
        "charge-1", "ship-1", "charge-2", "charge-3"]
    assert cursor.keys_taken == 4


def test_the_nth_step_looked_up_must_be_the_nth_journaled():
    cursor = JournalCursor(journal(("charge-1", "do"), ("ship-1", "do")), instance="w/1")
    assert cursor.examine("charge-1", "do").id == 1
    with pytest.raises(NonDeterminismError) as raised:
        cursor.examine("refund-1", "do")
    assert (raised.value.step, raised.value.expected_step, raised.value.position) == ("refund-1", "ship-1", 2)
    assert "w/1" in str(raised.value)


def test_new_steps_may_follow_the_journaled_ones():
    cursor = JournalCursor(journal(("charge-1", "do")), instance="w/1")
    assert cursor.examine("charge-1", "do") is not None
    assert cursor.examine("ship-1", "do") is None
    assert cursor.examine("notify-1", "sleep") is None


def test_a_step_reached_as_another_kind_is_refused():
    cursor = JournalCursor(journal(("nap-1", "sleep")), instance="w/1")
    with pytest.raises(NonDeterminismError) as raised:
        cursor.examine("nap-1", "do")
    assert (raised.value.journaled_kind, raised.value.replayed_kind) == ("sleep", "do")


def test_a_step_is_looked_up_once_and_its_position_is_the_first_look():
    cursor = JournalCursor(journal(("a-1", "do"), ("b-1", "do")), instance="w/1")
    first = cursor.examine("a-1", "do")
    assert cursor.examine("a-1", "do") is first
    assert cursor.steps_called == 1
    assert cursor.examine("b-1", "do") is not None


def test_patch_markers_take_no_position_among_the_steps():
    cursor = JournalCursor(journal(("a-1", "do"), ("patched(x)", "patch", {"after_steps": 1}), ("b-1", "do")),
                           instance="w/1")
    assert cursor.step_order() == ["a-1", "b-1"]
    cursor.examine("a-1", "do")
    assert cursor.examine("b-1", "do") is not None


def test_the_step_limit_counts_new_steps_and_lets_journaled_ones_replay():
    cursor = JournalCursor(step_limit=2, instance="w/1")
    cursor.count_step("a-1", journaled=True)
    cursor.count_step("a-2", journaled=True)
    cursor.count_step("a-3", journaled=True)  # journaled under a higher limit: replays
    with pytest.raises(StepLimitExceeded) as raised:
        cursor.count_step("a-4", journaled=False)
    assert (raised.value.step, raised.value.limit) == ("a-4", 2)


def test_patched_on_new_ground_writes_its_marker():
    cursor = JournalCursor(journal(("a-1", "do")), instance="w/1")
    cursor.take_key("a")
    assert cursor.patch_answer("patched(x)", "x") is None


def test_patched_where_the_journal_went_on_takes_the_old_path():
    cursor = JournalCursor(journal(("a-1", "do"), ("b-1", "do")), instance="w/1")
    cursor.take_key("a")
    assert cursor.patch_answer("patched(x)", "x") is False


def test_a_journaled_marker_answers_true_where_it_was_reached():
    cursor = JournalCursor(journal(("a-1", "do"), ("patched(x)", "patch", {"after_steps": 1})), instance="w/1")
    cursor.take_key("a")
    assert cursor.patch_answer("patched(x)", "x") is True


def test_a_marker_reached_after_another_number_of_steps_is_refused():
    cursor = JournalCursor(journal(("a-1", "do"), ("patched(x)", "patch", {"after_steps": 1})), instance="w/1")
    with pytest.raises(NonDeterminismError) as raised:
        cursor.patch_answer("patched(x)", "x")
    assert (raised.value.position, raised.value.journaled_position) == (0, 1)


def test_a_row_written_in_this_replay_is_seen_by_later_lookups():
    cursor = JournalCursor(instance="w/1")
    cursor.note("a-1", Entry(7, "do", "retrying", [], None, None, None, T0))
    assert cursor.journal["a-1"].id == 7
