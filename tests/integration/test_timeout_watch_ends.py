"""An attempt whose timeout fires just as it ends leaves no watch armed behind it.

A watch left armed interrupts its thread once a second for ever, in whatever the thread does next:
the journal's INSERT, another instance's replay, which the interruption escapes, leaving that
instance running with its lease held.
"""

import time
import traceback
from collections import Counter

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.foundations.control_flow import AttemptTimedOut
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Step
from django_workflows.testing import run_workflows
from tests.interruptions import disarmed_on_exit, held_at, interruptions_within, watches_left_armed


class QuickSteps(WorkflowEntrypoint):
    """Three steps whose bodies return at once, well within their timeout."""

    name = "quick-steps-under-a-timeout"

    def run(self, event, step):
        config = {"timeout": "200 milliseconds", "retries": {"limit": 1, "delay": 0}}
        return [step.do(f"step-{number}", lambda: "done", config=config) for number in range(3)]


registry.unregister(QuickSteps)  # only the tests here see it


@pytest.fixture
def quick_steps():
    registry.register(QuickSteps)
    yield workflows.get(QuickSteps.name)
    registry.unregister(QuickSteps)


@pytest.mark.django_db(transaction=True)
def test_an_attempt_whose_timeout_fires_as_it_ends_leaves_the_replays_after_it_uninterrupted(quick_steps):
    """The first attempt's body returns at once, but its thread is held past the deadline as it goes
    to end the watch (where the scheduler may make it let the GIL go). That attempt is a timeout, and
    retried. Then a second and a half of other instances' replays, in the same thread: a watch left
    armed would interrupt one of them after a second, inside a step's body (a timeout for a step that
    did not run long) or inside the engine's own code (out of the replay, the instance left running)."""
    escaped = []
    with disarmed_on_exit(), run_workflows() as env:
        quick_steps.create(id="held-at-its-deadline")
        with held_at("unwatch", "start", seconds=0.6):
            env.run_until_idle()
        replays_until = time.monotonic() + 1.5
        number = 0
        while time.monotonic() < replays_until:
            try:
                quick_steps.create(id=f"after-{number}")
                env.run_until_idle()
            except AttemptTimedOut:
                escaped.append(traceback.format_exc(limit=-4))  # where it landed
            number += 1
        left = watches_left_armed()
        interruptions = interruptions_within(0.1)

    assert escaped == []
    assert left == [] and interruptions == 0
    instances = list(Instance.objects.filter(workflow_name=QuickSteps.name))
    assert len(instances) == number + 1
    assert Counter(row.status for row in instances) == {"complete": number + 1}
    assert [row.instance_id for row in instances if row.lease_owner] == []
    attempts = {
        (instance_id, key): [(attempt["success"], attempt.get("error", {}).get("name")) for attempt in tried]
        for instance_id, key, tried in Step.objects.filter(instance__workflow_name=QuickSteps.name)
        .values_list("instance__instance_id", "key", "attempts")
    }
    assert len(attempts) == 3 * (number + 1)
    assert attempts.pop(("held-at-its-deadline", "step-0-1")) == [(False, "StepTimeoutError"), (True, None)]
    assert {key: tried for key, tried in attempts.items() if tried != [(True, None)]} == {}
