"""What keeps a replay honest: suspension that cannot be swallowed, the determinism guard, the step limit."""

import pytest

from django_workflows import StepLimitExceeded, WorkflowEntrypoint, workflows
from django_workflows.foundations.control_flow import Suspend
from django_workflows.reading.describe import describe_workflow
from django_workflows.models import Instance, Step
from tests.testapp.workflows import calls


@pytest.mark.one_flavour("a property of the Suspend class: no workflow runs")
def test_suspension_is_not_an_exception():
    assert issubclass(Suspend, BaseException) and not issubclass(Suspend, Exception)


def test_except_exception_around_a_step_never_swallows_the_suspension(workflows_env):
    instance = workflows.get("swallows-everything").create()
    workflows_env.run_until_idle()
    assert Instance.objects.get(pk=instance.pk).status == "waiting"
    workflows_env.advance("1 hour")
    assert Instance.objects.get(pk=instance.pk).waiting_for == ["go"]
    instance.send_event(type="go", payload=None)
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "went"
    assert calls["swallowed"] == 0


def test_a_journaled_key_met_with_another_kind_errors_the_instance(workflows_env):
    instance = workflows.get("shifty").create()
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "NonDeterminismError"
    assert "'x-1'" in status["error"]["message"]
    assert "as a do step" in status["error"]["message"] and "as a sleep step" in status["error"]["message"]
    # run() caught the NonDeterminismError, and the instance is errored all the same.
    assert calls["caught"] == 1


def test_step_limit_errors_the_instance_and_names_the_limit(workflows_env):
    instance = workflows.get("limited").create(params={"n": 5})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "StepLimitExceeded"
    assert "step limit of 3 steps" in status["error"]["message"]
    # Sleeps do not count: 3 do steps ran, and 4 sleeps were journaled around them.
    assert calls["s"] == 3
    assert Step.objects.filter(kind="do").count() == 3


def test_step_limit_allows_exactly_the_limit(workflows_env):
    instance = workflows.get("limited").create(params={"n": 3})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"


def test_step_limit_setting(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"STEP_LIMIT": 2}
    instance = workflows.get("loop").create(params={"n": 3})
    workflows_env.run_until_idle()
    assert "step limit of 2 steps" in instance.status()["error"]["message"]


def test_describe_reports_the_step_limit_the_replay_enforces(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"STEP_LIMIT": 2}
    described = describe_workflow("loop")
    assert described["step_limit"] == 2 and described["step_limit_from_setting"] is True
    instance = workflows.get("loop").create(params={"n": 3})
    workflows_env.run_until_idle()
    assert f"step limit of {described['step_limit']} steps" in instance.status()["error"]["message"]
    own = describe_workflow("limited")
    assert own["step_limit"] == 3 and own["step_limit_from_setting"] is False


@pytest.mark.one_flavour("a property of the error class: no workflow runs")
def test_step_limit_errors_are_workflow_errors():
    assert issubclass(StepLimitExceeded, Exception)


def test_event_is_read_only(workflows_env):
    instance = workflows.get("read-only-event").create(id="ro")
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {
        "refused": "FrozenInstanceError", "instance_id": "ro", "workflow_name": "read-only-event",
        "has_timestamp": True,
    }


@pytest.mark.one_flavour("no class is registered under the name: run() is never called")
def test_an_instance_of_a_workflow_that_no_longer_exists_stays_queued_and_the_check_says_why(workflows_env):
    from django_workflows.surfaces import checks
    from django_workflows.engine.replay import replay

    instance = workflows.get("three-steps").create()
    Instance.objects.filter(pk=instance.pk).update(workflow_name="gone")
    # No worker that does not know the class takes it: no lease, no error, for a worker that does.
    assert replay(instance.pk) is False
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.epoch, row.error, row.waiting_reason) == ("queued", 0, None, None)
    [message] = checks.check_unregistered_instances()
    assert message.id == "django_workflows.W011" and "'gone' (1 instance" in message.msg


def test_a_replay_of_a_finished_instance_does_nothing(workflows_env):
    from django_workflows.engine.replay import replay

    instance = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    assert replay(instance.pk) is False
    assert calls == {"a": 1, "b": 1, "c": 1}


@pytest.mark.one_flavour("about taking the lease: with it unexpired the replay never reaches run()")
@pytest.mark.parametrize("lease_expired", [True, False])
def test_a_running_instance_is_taken_over_only_once_its_lease_expired(workflows_env, lease_expired):
    from datetime import timedelta

    from django_workflows.engine.replay import replay

    instance = workflows.get("three-steps").create()
    offset = timedelta(seconds=-1 if lease_expired else 60)
    Instance.objects.filter(pk=instance.pk).update(status="running", lease_expires_at=workflows_env.now + offset)
    assert replay(instance.pk) is lease_expired


def terminate_own_instance(event) -> None:
    """A step body that counts itself, and terminates the instance it runs for the first time."""
    calls.update(["fenced body"])
    if calls["fenced body"] == 1:
        workflows.get(event.workflow_name).get(event.instance_id).terminate()


class SwallowsTheFence(WorkflowEntrypoint):
    """A run() that catches everything around each step, even the Fenced of a lost lease."""

    name = "swallows-the-fence"

    def run(self, event, step):
        for n in range(3):
            try:
                step.do(f"step {n}", lambda: terminate_own_instance(event))
            except BaseException:  # noqa: BLE001 - the point of the test
                calls.update(["swallowed"])
        return "went on"


@pytest.mark.one_flavour("an async run() is driven by the engine, which raises Fenced out of its event loop, "
                        "never into run(); and an async run() that catches BaseException swallows its own "
                        "cancellation as well")
def test_a_fenced_write_stops_the_replay_even_if_run_swallows_it(workflows_env):
    instance = workflows.get("swallows-the-fence").create()
    workflows_env.run_until_idle()
    # The first body terminated the instance: its journal write was fenced, and the two later step
    # calls met the lost lease before running their bodies, however run() caught what they raised.
    assert calls["fenced body"] == 1
    assert instance.status()["status"] == "terminated"
    assert not Step.objects.filter(instance_id=instance.pk).exists()


class TerminatedInItsLastStep(WorkflowEntrypoint):
    """A run() that returns straight after its last step, whose body terminates the instance: the step's
    row is kept for the release (one statement with it on PostgreSQL), and both are fenced."""

    name = "terminated-in-its-last-step"

    def run(self, event, step):
        step.do("first", lambda: 1)
        return step.do("last", lambda: terminate_own_instance(event))


@pytest.mark.one_flavour("an async run()'s rows are written as its rounds settle, never kept for the release")
def test_a_last_step_row_kept_for_the_release_is_fenced_with_it(workflows_env):
    instance = workflows.get("terminated-in-its-last-step").create()
    workflows_env.run_until_idle()
    row = Instance.objects.get(pk=instance.pk)
    # Neither the last step's row nor the end landed: the instance is as its terminate left it.
    assert row.status == "terminated" and row.output is None
    assert list(Step.objects.filter(instance_id=instance.pk).values_list("key", flat=True)) == ["first-1"]
    assert calls["fenced body"] == 1
