"""Continue-as-new: ``step.continue_as_new(params)`` ends the instance and starts its successor (the
next id of its family, linked both ways) in one fenced transaction, so a workflow that loops for ever
never grows its journal past one round of its loop, nor reaches the step limit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.errors import InvalidInstanceId, InvalidParams, InvalidTransition
from django_workflows.models import Instance, Step
from django_workflows.store import tags as instance_tags

swallowed: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    swallowed.clear()


class Counter(WorkflowEntrypoint):
    """Counts to ``until``, one instance a round: two steps each, far under its step limit of 3."""

    name = "continue-counter"
    step_limit = 3
    timeout = "1 day"

    def run(self, event, step):
        count = step.do("count", lambda: event.payload["count"] + 1)
        step.sleep("rest", "1 minute")
        if count > event.payload["until"]:
            return {"counted": count - 1}
        step.continue_as_new({"count": count, "until": event.payload["until"]})


class Swallower(WorkflowEntrypoint):
    """A bare except around continue_as_new: the instance continues all the same."""

    name = "continue-swallower"

    def run(self, event, step):
        if event.payload.get("last"):
            return "last"
        try:
            step.continue_as_new({"last": True})
        except BaseException as exc:  # noqa: BLE001 - what the test is about
            swallowed.append(type(exc).__name__)
        return "went on"


class BadParams(WorkflowEntrypoint):
    name = "continue-bad-params"

    def run(self, event, step):
        try:
            step.continue_as_new({"when": object()})
        except InvalidParams as exc:
            return {"refused": str(exc)}


class Lonely(WorkflowEntrypoint):
    """Terminated outside a step just before it continues: the ending is fenced, no successor is left."""

    name = "continue-fenced"

    def run(self, event, step):
        step.do("work", lambda: 1)
        workflows.get("continue-fenced").get(event.instance_id).terminate()
        step.continue_as_new({"never": True})


class LoopingKid(WorkflowEntrypoint):
    name = "continue-kid"

    def run(self, event, step):
        step.continue_as_new({})


class KidsParent(WorkflowEntrypoint):
    name = "continue-kids-parent"

    def run(self, event, step):
        try:
            step.child("kid", "continue-kid")
        except Exception as exc:  # noqa: BLE001 - the child's error, by its class
            return {"error": type(exc).__name__, "message": str(exc)}


def _family(root_id: str, workflow: str = "continue-counter") -> list[Instance]:
    """The family from its first member, following the successor links."""
    members = [Instance.objects.get(workflow_name=workflow, instance_id=root_id)]
    while members[-1].successor_id is not None:
        members.append(Instance.objects.get(pk=members[-1].successor_id))
    return members


def test_a_workflow_that_continues_as_new_100_times_ends_with_101_linked_instances(workflows_env):
    first = workflows.get("continue-counter").create(id="loop", params={"count": 0, "until": 100})
    workflows_env.advance("2 hours")
    family = _family("loop")
    assert len(family) == 101
    assert [member.instance_id for member in family] == ["loop"] + [f"loop~{n}" for n in range(2, 102)]
    assert [member.status for member in family] == ["complete"] * 101
    assert family[-1].output == {"counted": 100}
    assert all(member.output is None for member in family[:-1])
    # Linked both ways.
    assert family[0].predecessor_id is None
    assert all(later.predecessor_id == earlier.pk for earlier, later in zip(family, family[1:]))
    # No journal over its step count: each member journaled its own round, two steps.
    journals = [Step.objects.filter(instance_id=member.pk).count() for member in family]
    assert journals == [2] * 101
    assert [member.params["count"] for member in family] == list(range(101))
    assert first.status() == {"status": "complete", "output": None, "error": None, "predecessor": None,
                              "successor": "loop~2"}
    last = workflows.get("continue-counter").get("loop~101").status()
    assert (last["predecessor"], last["successor"], last["output"]) == ("loop~100", None, {"counted": 100})


def test_the_successor_keeps_subject_tags_retention_and_timeout(workflows_env):
    order = Group.objects.create(name="order-7")
    workflows.get("continue-counter").create(
        id="kept", params={"count": 0, "until": 1}, subject=order, tags={"tenant": "acme"},
        retention={"success": "3 days"}, timeout="5 hours")
    workflows_env.run_until_idle()
    workflows_env.advance("3 hours")
    first, second = _family("kept")
    assert second.instance_id == "kept~2"
    assert (second.subject, second.success_retention, second.timeout) == (order, timedelta(days=3),
                                                                          timedelta(hours=5))
    # Its deadline is its own, from its creation.
    assert second.deadline == second.created_at + timedelta(hours=5) != first.deadline
    assert instance_tags.of(second.pk) == {"tenant": "acme"}
    assert second.status == "complete"


class KeyedCounter(WorkflowEntrypoint):
    """Counts for one customer, one at a time per customer, continuing as new once."""

    name = "continue-keyed"
    concurrency = {"limit": 1, "key": "params.customer"}

    def run(self, event, step):
        if event.payload["round"] == 2:
            return "done"
        step.do("count", lambda: event.payload["round"])
        step.continue_as_new({"customer": event.payload["customer"], "round": 2})


def test_the_successor_keeps_its_queue_priority_and_limit_key(workflows_env):
    # The same run, continued: it stays on its queue, at its priority, counted for its customer.
    workflows.get("continue-keyed").create(id="acme-count", params={"customer": "acme", "round": 1},
                                           queue="heavy", priority=5)
    workflows_env.run_until_idle()
    first, second = _family("acme-count", "continue-keyed")
    assert (second.queue, second.priority, second.limit_key) == ("heavy", 5, "acme")
    assert second.turn_at == second.created_at - 5 * timedelta(seconds=60)
    assert second.status == "complete"


def test_a_swallowed_continuation_continues_all_the_same(workflows_env):
    workflows.get("continue-swallower").create(id="sw", params={})
    workflows_env.run_until_idle()
    first, second = _family("sw", "continue-swallower")
    assert swallowed == ["ContinueAsNew"]
    assert (first.status, first.output, second.output) == ("complete", None, "last")


def test_params_that_cannot_be_journaled_are_refused_in_run(workflows_env):
    instance = workflows.get("continue-bad-params").create()
    workflows_env.run_until_idle()
    output = instance.status()["output"]
    assert "step.continue_as_new()" in output["refused"] and "object" in output["refused"]
    assert Instance.objects.filter(workflow_name="continue-bad-params").count() == 1


@pytest.mark.one_flavour("its run() terminates its own instance outside a step, which an async run() may not do")
def test_an_ending_fenced_by_a_terminate_leaves_no_successor(workflows_env):
    instance = workflows.get("continue-fenced").create(id="alone")
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "terminated"
    assert list(Instance.objects.filter(workflow_name="continue-fenced").values_list("instance_id", flat=True)) == [
        "alone"]
    assert Instance.objects.get(pk=instance.pk).successor_id is None


def test_a_child_cannot_continue_as_new(workflows_env):
    parent = workflows.get("continue-kids-parent").create()
    workflows_env.run_until_idle()
    output = parent.status()["output"]
    assert output["error"] == "InvalidStepInput"
    assert "cannot continue as new" in output["message"]
    assert Instance.objects.filter(workflow_name="continue-kid").count() == 1


def test_a_member_that_continued_cannot_be_restarted_its_last_can(workflows_env):
    first = workflows.get("continue-counter").create(id="again", params={"count": 0, "until": 1})
    workflows_env.advance("1 hour")
    with pytest.raises(InvalidTransition, match="continued as new as continue-counter/again~2"):
        first.restart()
    with pytest.raises(InvalidTransition, match="continued as new"):
        first.restart(from_step="count")
    assert Instance.objects.get(pk=first.pk).status == "complete"
    last = workflows.get("continue-counter").get("again~2")
    last.restart()
    workflows_env.advance("1 hour")
    assert last.status()["output"] == {"counted": 1}
    assert len(_family("again")) == 2


class AsyncLooper(WorkflowEntrypoint):
    """An async run() continues as new without awaiting the call (awaiting it works the same)."""

    name = "continue-async"

    async def run(self, event, step):
        n = await step.do("n", lambda: event.payload["n"])
        if n < 3:
            step.continue_as_new({"n": n + 1})
        return n


@pytest.mark.one_flavour("its run() is an async def already")
def test_an_async_run_continues_as_new(workflows_env):
    workflows.get("continue-async").create(id="aloop", params={"n": 1})
    workflows_env.run_until_idle()
    family = _family("aloop", "continue-async")
    assert [(member.instance_id, member.output) for member in family] == [
        ("aloop", None), ("aloop~2", None), ("aloop~3", 3)]


@pytest.mark.one_flavour("it runs no workflow")
def test_a_caller_cannot_create_an_id_of_a_family(workflows_env):
    with pytest.raises(InvalidInstanceId, match="letters, digits"):
        workflows.get("continue-counter").create(id="loop~2", params={"count": 0, "until": 0})
    assert not Instance.objects.filter(workflow_name="continue-counter").exists()
