"""Property: a random async program of gathered steps, sleeps and races between a wait and a sleep,
replayed after a crash at any point inside a gathered body, gives the same output and journal as an
uninterrupted run. Only the bodies of the round the crash interrupted run again: every body of a gather
runs its attempt before any of them is journaled."""

import asyncio
from collections import Counter
from datetime import timedelta

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.errors import WorkflowTimeoutError
from django_workflows.models import Step
from django_workflows.store.dispatch import sweep
from tests.testapp.workflows import SimulatedCrash

calls = Counter()
# {(instance_id, op index, member, "before" | "after")}, each crashing once.
crash_points: set = set()

member = st.tuples(st.integers(0, 2), st.integers(0, 2))  # (attempts that fail, retry limit)
gather_op = st.tuples(st.just("gather"), st.lists(member, min_size=1, max_size=3))
sleep_op = st.tuples(st.just("sleep"), st.sampled_from([0, 60_000]))
race_op = st.tuples(st.just("race"), st.booleans())
programs = st.lists(st.one_of(gather_op, gather_op, sleep_op, race_op), min_size=1, max_size=4)


class GatherProgram(WorkflowEntrypoint):
    """ops: ["gather", [[fails, limit], ...]] | ["sleep", ms] | ["race", deliver]."""

    name = "gather-program"

    async def run(self, event, step):
        iid, trace = event.instance_id, []
        for index, op in enumerate(event.payload["ops"]):
            if op[0] == "gather":
                members = [step.do(f"op{index}", _body(iid, index, j, fails),
                                   config={"retries": {"limit": limit, "delay": "1 second"}})
                           for j, (fails, limit) in enumerate(op[1])]
                settled = await asyncio.gather(*members, return_exceptions=True)
                trace.append([value if isinstance(value, int) else f"failed: {value}" for value in settled])
            elif op[0] == "sleep":
                await step.sleep(f"sleep{index}", op[1])
                trace.append("slept")
            else:
                wait = step.wait_for_event(f"wait{index}", "go" if op[1] else "never", timeout="1 hour")
                nap = step.sleep(f"nap{index}", "30 minutes")
                done, _ = await asyncio.wait([wait, nap], return_when=asyncio.FIRST_COMPLETED)
                trace.append(sorted("event" if future is wait else "nap" for future in done))
                # The loser is awaited too: it settles in a later round than the winner.
                outcome = (await asyncio.gather(wait, nap, return_exceptions=True))[0]
                trace.append("timeout" if isinstance(outcome, WorkflowTimeoutError) else "event")
        return trace


def _body(iid, index, j, fails):
    def body(ctx):
        if (iid, index, j, "before") in crash_points:
            crash_points.discard((iid, index, j, "before"))
            raise SimulatedCrash()
        calls.update([(iid, index, j)])
        if (iid, index, j, "after") in crash_points:
            crash_points.discard((iid, index, j, "after"))
            raise SimulatedCrash()
        if ctx.attempt <= fails:
            raise ValueError(f"op {index}.{j} attempt {ctx.attempt}")
        return index * 10 + j

    return body


def run_to_the_end(env, instance_id, ops, crash=None):
    handle = workflows.get("gather-program")
    instance = handle.create(id=instance_id, params={"ops": [list(op) for op in ops]})
    for _ in range(sum(1 for op in ops if op[0] == "race" and op[1])):
        instance.send_event(type="go", payload=None)
    if crash:
        crash_points.add((instance_id, *crash))
    crashed = False
    for _ in range(50):
        try:
            env.advance("2 hours")
        except SimulatedCrash:
            crashed = True
            env.clock.advance(timedelta(minutes=2))
            sweep()
            continue
        if instance.status()["status"] in ("complete", "errored"):
            break
    state = instance.status()
    counts = {key[1:]: n for key, n in calls.items() if key[0] == instance_id}
    rows = list(Step.objects.filter(instance_id=instance.pk).order_by("id").values_list("key", "status", "settled_in"))
    return state, counts, rows, crashed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(ops=programs)
@example(ops=[("race", True), ("gather", [(1, 1), (0, 0), (2, 0)]), ("race", False), ("sleep", 60_000)])
def test_a_crash_in_a_gathered_body_changes_nothing_but_its_round(workflows_env, ops):
    run_id = f"g{len(calls)}-{abs(hash(str(ops))) % 10**8}"
    expected, expected_counts, expected_rows, _ = run_to_the_end(workflows_env, f"{run_id}-clean", ops)
    assert expected["status"] == "complete"
    for index, op in enumerate(ops):
        if op[0] != "gather":
            continue
        for j in range(len(op[1])):
            for moment in ("before", "after"):
                instance_id = f"{run_id}-{index}_{j}{moment[0]}"
                state, counts, rows, crashed = run_to_the_end(workflows_env, instance_id, ops, (index, j, moment))
                assert crashed
                assert state == expected
                assert rows == expected_rows
                # The round's first attempts all ran before the crash, and none was journaled.
                reran = {(index, k): 1 for k in range(len(op[1])) if k != j or moment == "after"}
                assert counts == {key: n + reran.get(key, 0) for key, n in expected_counts.items()}, (index, j)
