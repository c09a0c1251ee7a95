"""step.progress: a journaled marker per call, written once whatever the replays, read back latest first."""

import pytest

from django_workflows import workflows
from django_workflows.models import Step, StepKind
from tests.testapp.workflows import REPORTING, calls


def markers(instance):
    return list(Step.objects.filter(instance_id=instance.pk, kind=StepKind.PROGRESS).order_by("id")
                .values_list("key", "result"))


def test_each_call_is_one_marker_and_the_latest_is_readable(workflows_env):
    instance = workflows.get("reporting").create(params={"parts": 3})
    assert instance.progress() is None
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"parts": 3}
    assert [key for key, _ in markers(instance)] == [f"progress({n})" for n in range(1, 5)]
    latest = instance.progress()
    assert latest["value"] == {"done": 3, "total": 3}
    assert latest["at"] is not None


def test_a_replay_reports_no_progress_twice(workflows_env):
    instance = workflows.get("reporting").create(params={"parts": 2, "wait": True})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    assert [result["value"] for _, result in markers(instance)] == [{"done": 0, "total": 2}, {"done": 1, "total": 2}]
    assert instance.progress()["value"] == {"done": 1, "total": 2}

    instance.send_event(type="go")
    workflows_env.run_until_idle()
    # The second replay passed the first two calls again and wrote only the third.
    assert instance.status()["status"] == "complete"
    assert [result["value"] for _, result in markers(instance)] == [
        {"done": 0, "total": 2}, {"done": 1, "total": 2}, {"done": 2, "total": 2}]
    assert calls["part"] == 2


def test_a_marker_remembers_where_run_stood(workflows_env):
    instance = workflows.get("reporting").create(params={"parts": 1})
    workflows_env.run_until_idle()
    assert [result["after_steps"] for _, result in markers(instance)] == [0, 1]


def test_progress_takes_no_position_among_the_steps(workflows_env):
    """Added to a workflow with instances under way, step.progress is no NonDeterminismError."""
    REPORTING["on"] = False
    try:
        instance = workflows.get("reporting").create(params={"parts": 2, "wait": True})
        workflows_env.run_until_idle()
        assert instance.status()["status"] == "waiting" and markers(instance) == []
    finally:
        REPORTING["on"] = True
    instance.send_event(type="go")
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    assert instance.progress()["value"] == {"done": 2, "total": 2}


def test_a_restart_reports_again(workflows_env):
    instance = workflows.get("reporting").create(params={"parts": 1})
    workflows_env.run_until_idle()
    instance.restart()
    assert instance.progress() is None
    workflows_env.run_until_idle()
    assert instance.progress()["value"] == {"done": 1, "total": 1}
    assert len(markers(instance)) == 2


@pytest.mark.parametrize("refused, why", [("object", "is not JSON-serializable"), ("large", "bytes")])
def test_a_value_it_cannot_keep_fails_the_instance_saying_why(workflows_env, refused, why):
    instance = workflows.get("reporting").create(params={"refused": refused})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "InvalidStepInput"
    assert "step.progress()" in status["error"]["message"] and why in status["error"]["message"]
    assert markers(instance) == []


def test_markers_are_not_steps(workflows_env):
    instance = workflows.get("reporting").create(params={"parts": 2})
    workflows_env.run_until_idle()
    assert Step.objects.progress_of(instance) == {"part": {"succeeded": 2}}
