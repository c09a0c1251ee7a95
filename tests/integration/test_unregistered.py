"""An instance whose workflow this process does not know (an old worker in a rolling deploy, a
workflows.py that failed to import) waits, says why, and resumes once a worker knows the class."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.surfaces import checks
from django_workflows.shared.definition import registry
from django_workflows.models import Instance
from django_workflows.engine.replay import replay

ran = []


class Deployed(WorkflowEntrypoint):
    """Stands for a workflow defined by code some workers do not run yet."""

    name = "newly-deployed"

    def run(self, event, step):
        first = step.do("first", lambda: ran.append("first") or 1)
        step.sleep("pause", "1 minute")
        second = step.do("second", lambda: ran.append("second") or 2)
        return first + second


# Defining the class registered it: only the tests here see it, so that the lists of workflows that
# other tests check stay as they are.
registry.unregister(Deployed)


@pytest.fixture
def deployed():
    ran.clear()
    registry.register(Deployed)
    yield Deployed
    registry.unregister(Deployed)
    ran.clear()


def describe(*args) -> str:
    out = io.StringIO()
    call_command("workflows", "instances", "describe", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def asleep_after_its_first_step(env):
    instance = workflows.get("newly-deployed").create(id="n-1")
    env.run_until_idle()
    assert (Instance.objects.get(pk=instance.pk).status, ran) == ("waiting", ["first"])
    return instance


def _untouched(instance, before):
    row = Instance.objects.get(pk=instance.pk)
    return (row.status, row.epoch, row.lease_owner, row.waiting_reason, row.crash_count) == before


def _state(instance):
    row = Instance.objects.get(pk=instance.pk)
    return (row.status, row.epoch, row.lease_owner, row.waiting_reason, row.crash_count)


def test_a_replay_that_does_not_know_the_workflow_leaves_it_untouched_and_a_worker_that_does_runs_it(
    workflows_env, deployed
):
    instance = asleep_after_its_first_step(workflows_env)
    registry.unregister(deployed)
    workflows_env.clock.advance(timedelta(minutes=1))
    before = _state(instance)
    # Not claimed at all: no lease taken and handed back, no reason written, no wake-up set.
    assert replay(instance.pk) is False
    assert _untouched(instance, before)
    assert ran == ["first"]

    registry.register(deployed)
    assert replay(instance.pk)
    row = Instance.objects.get(pk=instance.pk)
    assert (row.status, row.output, row.waiting_reason) == ("complete", 3, None)
    assert ran == ["first", "second"]  # the journaled step was not run again


def test_a_replay_that_does_not_know_the_workflow_keeps_the_crash_count(workflows_env, deployed):
    instance = asleep_after_its_first_step(workflows_env)
    registry.unregister(deployed)
    # Two replays lost with their worker before: not running the workflow at all is no progress.
    Instance.objects.filter(pk=instance.pk).update(crash_count=2, wake_at=workflows_env.now)
    assert replay(instance.pk) is False
    assert Instance.objects.get(pk=instance.pk).crash_count == 2


def test_only_a_sweeper_that_knows_the_workflow_queues_its_stale_instances_again(workflows_env, deployed):
    from django_workflows.store.dispatch import sweep

    instance = workflows.get("newly-deployed").create(id="n-stale")
    workflows_env.executor.reset()
    registry.unregister(deployed)
    workflows_env.clock.advance(timedelta(minutes=5))
    # An old worker's sweeper leaves it to the workers that can run it; theirs queues it again.
    assert sweep() == 0 and workflows_env.executor.enqueued == []
    registry.register(deployed)
    assert sweep() == 1 and workflows_env.executor.enqueued == [instance.pk]


def test_manage_py_check_lists_the_workflows_with_live_instances_not_registered(workflows_env, deployed):
    asleep_after_its_first_step(workflows_env)
    workflows.get("newly-deployed").create(id="n-2")
    finished = workflows.get("newly-deployed").create(id="n-3")
    finished.terminate()
    assert checks.check_unregistered_instances() == []
    registry.unregister(deployed)
    [message] = checks.check_unregistered_instances()
    assert message.id == "django_workflows.W011"
    assert "'newly-deployed' (2 instances)" in message.msg  # the terminated one is finished
    out = io.StringIO()
    call_command("check", stdout=out, stderr=out)
    assert "django_workflows.W011" in out.getvalue()


def test_an_instance_inserted_by_the_previous_release_without_the_newer_columns_runs(workflows_env):
    """During a rolling deploy, workers of the previous release insert instances naming only the columns
    they know: every column added since has a database default (terminating, 0010), not only Django's."""
    from django.db import connection

    from django_workflows.shared import clock

    stamp = connection.ops.adapt_datetimefield_value(clock.now())
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_workflows_instance (workflow_name, instance_id, params, status, output, error, "
            "traceback, wake_at, waiting_for, current_step, lease_owner, lease_expires_at, epoch, crash_count, "
            "created_at, started_at, ended_at, updated_at) "
            "VALUES ('three-steps', 'old-release', NULL, 'queued', NULL, NULL, '', NULL, NULL, '', '', NULL, 1, 0, "
            "%s, NULL, NULL, %s)",
            [stamp, stamp],
        )
    instance = workflows.get("three-steps").get("old-release")
    assert Instance.objects.get(pk=instance.pk).terminating is False
    assert replay(instance.pk)
    assert instance.status()["status"] == "complete"


class RateDeployed(WorkflowEntrypoint):
    """A rate-limited workflow defined by code some workers do not run yet."""

    name = "rate-deployed"
    rate_limit = "1/minute"

    def run(self, event, step):
        return step.do("one", lambda: 1)


registry.unregister(RateDeployed)


def test_a_worker_without_a_rate_limited_workflow_does_not_spend_its_start(workflows_env):
    """A worker of the previous release does not take the instance: that is no start, so the worker that
    knows the class still holds it to the rate limit."""
    registry.register(RateDeployed)
    try:
        first = workflows.get("rate-deployed").create(id="r-1")
        second = workflows.get("rate-deployed").create(id="r-2")
        registry.unregister(RateDeployed)
        assert replay(first.pk) is False  # the old worker: left queued for one that knows the class
        row = Instance.objects.get(pk=first.pk)
        assert (row.status, row.started_at) == ("queued", None)
        registry.register(RateDeployed)
        assert replay(second.pk)
        assert Instance.objects.get(pk=second.pk).status == "complete"
        # The window of one start a minute is spent: the first instance waits for it, not runs.
        assert replay(first.pk) is False
        row = Instance.objects.get(pk=first.pk)
        assert row.status == "waiting" and "rate limit 1/minute" in row.waiting_reason
        assert row.started_at is None
    finally:
        registry.unregister(RateDeployed)
