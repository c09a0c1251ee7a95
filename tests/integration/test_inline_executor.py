"""The inline executor with the real clock: replays run when the transaction commits."""

import pytest
from django.db import transaction

from django_workflows import workflows
from django_workflows.executors import get_executor
from django_workflows.executors.inline import InlineExecutor
from tests.testapp.workflows import calls

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def inline_executor(settings):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


def test_create_runs_the_instance_on_commit():
    assert isinstance(get_executor(), InlineExecutor)
    instance = workflows.get("three-steps").create(params={})
    assert instance.status()["status"] == "complete"


def test_nothing_runs_before_commit_or_after_rollback():
    with transaction.atomic():
        instance = workflows.get("three-steps").create(id="in-tx", params={})
        assert instance.status()["status"] == "queued" and calls == {}
    assert instance.status()["status"] == "complete"

    with pytest.raises(RuntimeError), transaction.atomic():
        workflows.get("three-steps").create(id="rolled-back", params={})
        raise RuntimeError("roll back")
    assert calls == {"a": 1, "b": 1, "c": 1}
    from django_workflows.models import Instance

    assert not Instance.objects.filter(instance_id="rolled-back").exists()


def test_an_event_resumes_inline():
    instance = workflows.get("approval").create()
    assert instance.status()["status"] == "waiting"
    instance.send_event(type="manager-approval", payload={"outcome": "rejected"})
    assert instance.status()["output"]["status"] == "rejected"


def test_run_due_runs_instances_whose_wake_time_has_passed():
    from datetime import timedelta

    from django_workflows.shared import clock
    from django_workflows.testing import ManualClock

    # A clock that moves only when told: a loaded machine cannot make the sleep due too early.
    manual = ManualClock()
    previous = clock.use(manual)
    try:
        instance = workflows.get("sleeper").create(params={"duration": 50})
        assert instance.status()["status"] == "waiting"
        assert get_executor().run_due() == 0  # not due yet
        manual.advance(timedelta(milliseconds=60))
        assert get_executor().run_due() == 1
        assert instance.status()["output"] == "after"
    finally:
        clock.use(previous)


class FailingInlineExecutor(InlineExecutor):
    """A project's own inline executor whose replay fails: its error is the caller's to see."""

    def enqueue_replay(self, instance_pk: int) -> None:
        raise LookupError(f"the replay of {instance_pk} failed")


def test_a_failing_inline_replay_reaches_the_caller_instead_of_a_broker_warning(settings):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "tests.integration.test_inline_executor.FailingInlineExecutor"}
    with pytest.raises(LookupError, match="the replay of"):
        workflows.get("three-steps").create(id="fails-inline", params={})


def test_a_create_holding_its_lease_still_gives_way_to_a_queued_instance_of_higher_priority():
    from datetime import timedelta

    from django_workflows.shared import clock
    from django_workflows.models import Instance

    # Queued and not replayed (its replay was lost, say): priority 9, its turn an hour ago.
    now = clock.now()
    high = Instance.objects.create(workflow_name="three-steps", instance_id="high", params={}, status="queued",
                                   priority=9, turn_at=now - timedelta(hours=1), created_at=now, updated_at=now)
    low = workflows.get("three-steps").create(id="low", params={})
    assert low.status()["status"] == "complete"
    high.refresh_from_db()
    ran = Instance.objects.get(instance_id="low")
    # The new instance was inserted queued, and its replay took the one it gives way to first, then its own.
    assert high.status == "complete" and high.started_at <= ran.started_at
    assert (high.epoch, ran.epoch) == (1, 1)


def test_an_instance_created_holding_its_lease_runs_once_under_it():
    from django_workflows.models import Instance

    instance = workflows.get("three-steps").create(id="held", params={})
    row = Instance.objects.get(instance_id="held")
    assert instance.status()["status"] == "complete"
    # One lease ever (the INSERT's), no crash counted, the lease given back.
    assert (row.epoch, row.crash_count, row.lease_owner, row.lease_expires_at) == (1, 0, "", None)
    assert calls == {"a": 1, "b": 1, "c": 1}
