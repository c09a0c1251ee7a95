"""Property: a random workflow program replayed after a crash at any point gives the same output and
the same side effects as an uninterrupted run; only the step the crash interrupted may run twice. The
points include the undos of a failed program's rollback, and its outcome includes the rollback's."""

from collections import Counter
from datetime import timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_workflows import workflows
from django_workflows.models import Step
from django_workflows.store.dispatch import sweep
from tests.testapp.workflows import SimulatedCrash, calls, crash_points

do_op = st.tuples(st.just("do"), st.integers(0, 3), st.integers(0, 2), st.booleans())
sleep_op = st.tuples(st.just("sleep"), st.sampled_from([0, 1000, 60_000]))
wait_op = st.tuples(st.just("wait"), st.booleans())
programs = st.lists(st.one_of(do_op, do_op, sleep_op, wait_op), min_size=1, max_size=6)


def run_to_the_end(env, handle, instance_id, ops, crash=None):
    """Create the instance (its events sent first), run it, surviving one crash, and return its outcome."""
    instance = handle.create(id=instance_id, params={"ops": [list(op) for op in ops]})
    for n in range(sum(1 for op in ops if op[0] == "wait" and op[1])):
        instance.send_event(type="go", payload=n)
    if crash:
        crash_points.add((instance_id, *crash))
    crashed = False
    for _ in range(50):
        try:
            env.advance("2 hours")
        except SimulatedCrash:
            crashed = True
            # The worker is gone with its lease; once the lease expires the sweeper hands it on.
            env.clock.advance(timedelta(minutes=2))
            sweep()
            continue
        if instance.status()["status"] in ("complete", "errored"):
            break
    state = instance.status()
    counts = {key[1]: n for key, n in calls.items() if key[0] == instance_id and len(key) == 2}
    rows = Counter(Step.objects.filter(instance_id=instance.pk).values_list("key", flat=True))
    return state, counts, rows, crashed


def crash_points_of(ops):
    """Before and after each step's body, and before and after each step's undo (which runs only when the
    program errors)."""
    return [(point, moment) for index, op in enumerate(ops) if op[0] == "do"
            for point in (index, f"undo{index}") for moment in ("before", "after")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ops=programs)
# A program that fails after two steps succeeded: its rollback undoes them, and is crashed at every point.
@example(ops=[("do", 0, 0, False), ("sleep", 1000), ("do", 0, 0, False), ("do", 5, 0, False)])
def test_a_crash_anywhere_changes_nothing_but_the_interrupted_step(workflows_env, ops):
    handle = workflows.get("program")
    run_id = f"p{len(calls)}-{abs(hash(tuple(ops))) % 10**8}"
    expected, expected_counts, expected_rows, _ = run_to_the_end(workflows_env, handle, f"{run_id}-clean", ops)
    assert expected["status"] in ("complete", "errored")
    assert set(expected_rows.values()) <= {1}  # one journal row per step
    for index, moment in crash_points_of(ops):
        if index not in expected_counts and moment == "after":
            continue  # the program never reached this step (an earlier one errored it)
        instance_id = f"{run_id}-{index}{moment[0]}"
        state, counts, rows, crashed = run_to_the_end(workflows_env, handle, instance_id, ops, (index, moment))
        assert crashed == (index in expected_counts)  # every step the program reaches was crashed once
        assert state == expected
        assert rows == expected_rows
        reran = {index: 1} if crashed and moment == "after" else {}
        assert counts == {k: v + reran.get(k, 0) for k, v in expected_counts.items()}, (index, moment)
