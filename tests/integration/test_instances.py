"""The instance API: create, create_batch, get, status and every transition."""

import pytest

from django_workflows import workflows
from django_workflows.errors import (
    InstanceAlreadyExists,
    InstanceNotFound,
    InvalidParams,
    InvalidTransition,
    WorkflowNotFound,
)
from django_workflows.models import Event, Instance, Step
from tests.testapp.workflows import calls


def test_create_with_a_uuid_by_default(workflows_env):
    instance = workflows.get("three-steps").create()
    assert len(instance.id) == 36
    assert instance.status() == {"status": "queued", "output": None, "error": None}


def test_create_with_an_id_and_get_it_back(workflows_env):
    created = workflows.get("three-steps").create(id="order-1", params={"n": 1})
    found = workflows.get("three-steps").get("order-1")
    assert found == created and found.id == "order-1"
    assert Instance.objects.get(pk=found.pk).params == {"n": 1}


def test_the_same_id_in_another_workflow_is_another_instance(workflows_env):
    a = workflows.get("three-steps").create(id="same")
    b = workflows.get("sleeper").create(id="same")
    assert a != b


def test_an_existing_id_is_a_clear_error_and_changes_nothing(workflows_env):
    workflows.get("three-steps").create(id="dup", params={"first": True})
    with pytest.raises(InstanceAlreadyExists, match="already has an instance with id 'dup'"):
        workflows.get("three-steps").create(id="dup", params={"first": False})
    assert Instance.objects.get().params == {"first": True}


@pytest.mark.parametrize("bad", ["", "has space", "-dash-first", "x" * 101, 42, "ünïcode"])
def test_bad_ids_are_refused(workflows_env, bad):
    with pytest.raises(InvalidParams, match="Invalid instance id"):
        workflows.get("three-steps").create(id=bad)
    assert not Instance.objects.exists()


def test_ids_of_100_characters_are_accepted(workflows_env):
    assert workflows.get("three-steps").create(id="i" * 100).id == "i" * 100


def test_params_must_be_json(workflows_env):
    with pytest.raises(InvalidParams, match="is not JSON-serializable"):
        workflows.get("three-steps").create(params={"when": object()})
    assert not Instance.objects.exists()


def test_unknown_workflow_and_instance(workflows_env):
    with pytest.raises(WorkflowNotFound, match="No workflow named 'nope'. Known workflows: .*three-steps"):
        workflows.get("nope")
    with pytest.raises(InstanceNotFound, match="no instance with id 'missing'"):
        workflows.get("three-steps").get("missing")


def test_create_batch_is_idempotent(workflows_env):
    handle = workflows.get("three-steps")
    handle.create(id="b2", params={"old": True})
    batch = [{"id": "b1", "params": {"n": 1}}, {"id": "b2", "params": {"n": 2}}, {"params": {"n": 3}}]
    first = handle.create_batch(batch)
    assert [i.id for i in first[:2]] == ["b1", "b2"] and len(first) == 3
    assert Instance.objects.get(instance_id="b2").params == {"old": True}  # skipped, not overwritten
    again = handle.create_batch(batch[:2])
    assert again == first[:2]
    assert Instance.objects.count() == 3
    workflows_env.run_until_idle()
    assert {i.status()["status"] for i in first} == {"complete"}


def test_create_batch_limits(workflows_env):
    handle = workflows.get("three-steps")
    with pytest.raises(InvalidParams, match="at most 100"):
        handle.create_batch([{"id": f"i{n}"} for n in range(101)])
    with pytest.raises(InvalidParams, match="repeats an instance id"):
        handle.create_batch([{"id": "x"}, {"id": "x"}])
    with pytest.raises(InvalidParams, match="must be a dict"):
        handle.create_batch([{"id": "x", "colour": "red"}])
    with pytest.raises(InvalidParams, match="Invalid instance id"):
        handle.create_batch([{"id": "ok"}, {"id": "not ok"}])
    assert not Instance.objects.exists()
    assert len(handle.create_batch([{"id": f"i{n}"} for n in range(100)])) == 100


def test_pause_and_resume_a_waiting_instance(workflows_env):
    instance = workflows.get("sleeper").create(params={})
    workflows_env.run_until_idle()
    instance.pause()
    assert instance.status()["status"] == "paused"
    workflows_env.advance("2 hours")  # the sleep ends, but a paused instance does not run
    assert instance.status()["status"] == "paused" and calls["after"] == 0
    instance.resume()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "after"


def test_pause_a_running_instance_finishes_its_current_step_first(workflows_env):
    instance = workflows.get("pausable").create(params={"pause_self": True})
    workflows_env.run_until_idle()
    # pause() was called inside step "first": waitingForPause, then paused once "first" was journaled.
    assert instance.status()["status"] == "paused"
    assert calls == {"first": 1}
    assert list(Step.objects.values_list("key", flat=True)) == ["first-1"]
    instance.resume()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"
    assert calls == {"first": 1, "second": 1}


def test_waiting_for_pause_status_and_resume_withdraws_it(workflows_env):
    instance = workflows.get("three-steps").create()
    Instance.objects.filter(pk=instance.pk).update(status="running")
    instance.pause()
    assert instance.status()["status"] == "waitingForPause"
    instance.resume()
    assert instance.status()["status"] == "running"


def test_terminate_stops_a_running_replay(workflows_env):
    instance = workflows.get("terminator").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "terminated"
    # The step that terminated ran; its result and everything after were refused.
    assert calls == {"first": 1}
    assert not Step.objects.exists()


def test_terminate_a_waiting_instance(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    instance.terminate()
    assert instance.status()["status"] == "terminated"
    with pytest.raises(InvalidTransition):
        instance.send_event(type="manager-approval", payload={})
    workflows_env.advance("100 hours")
    assert instance.status()["status"] == "terminated"


def test_restart_clears_journal_and_consumed_events_and_runs_from_the_top(workflows_env):
    instance = workflows.get("two-waits").create()
    instance.send_event(type="tick", payload="a")
    instance.send_event(type="tick", payload="b")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == ["a", "b"]
    instance.send_event  # noqa: B018
    instance.restart()
    assert instance.status() == {"status": "queued", "output": None, "error": None}
    assert not Step.objects.exists() and not Event.objects.exists()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"


def test_restart_keeps_unconsumed_events(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    instance.pause()
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    instance.restart()
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "approved"
    assert calls["ask"] == 2


def test_restart_an_errored_instance(workflows_env):
    instance = workflows.get("uncaught").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "errored"
    instance.restart()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "errored" and calls["boom"] == 2


@pytest.mark.parametrize(
    "status, action",
    [
        ("complete", "pause"), ("errored", "pause"), ("terminated", "pause"), ("paused", "pause"),
        ("waitingForPause", "pause"),
        ("queued", "resume"), ("running", "resume"), ("waiting", "resume"), ("complete", "resume"),
        ("complete", "terminate"), ("errored", "terminate"), ("terminated", "terminate"),
    ],
)
def test_transitions_that_are_not_allowed_are_clear_errors_and_change_nothing(workflows_env, status, action):
    instance = workflows.get("three-steps").create()
    Instance.objects.filter(pk=instance.pk).update(status=status)
    before = Instance.objects.values().get(pk=instance.pk)
    with pytest.raises(InvalidTransition, match=f"Cannot {action} instance three-steps/.*: it is {status}"):
        getattr(instance, action)()
    assert Instance.objects.values().get(pk=instance.pk) == before


def test_a_step_creating_an_instance_does_not_recurse(workflows_env):
    parent = workflows.get("spawner").create(id="p")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == "spawned"
    assert workflows.get("three-steps").get("child-of-p").status()["status"] == "complete"
