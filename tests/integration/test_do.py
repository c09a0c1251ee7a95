"""step.do: both forms, journaled results, retries with backoff, failures, timeouts, results."""

from datetime import timedelta

import pytest

from django_workflows import workflows
from django_workflows.models import Instance, Step, StepStatus
from tests.testapp.workflows import calls


def start(name, params=None, id=None):
    return workflows.get(name).create(id=id, params=params if params is not None else {})


def test_direct_and_decorator_forms_run_each_step_once(workflows_env):
    instance = start("three-steps", {"x": 1})
    workflows_env.run_until_idle()
    assert instance.status() == {
        "status": "complete", "output": {"sum": 6, "b": {"a": 1, "b": 2}, "params": {"x": 1}}, "error": None
    }
    assert calls == {"a": 1, "b": 1, "c": 1}
    keys = list(Step.objects.filter(instance_id=instance.pk).values_list("key", "kind", "status"))
    assert keys == [("a-1", "do", "succeeded"), ("b-1", "do", "succeeded"), ("c-1", "do", "succeeded")]


def test_a_replay_returns_journaled_results_without_calling_fn(workflows_env):
    instance = start("sleeper")
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status() == {"status": "complete", "output": "after", "error": None}
    # "before" ran in the first replay only; the second replay took it from the journal.
    assert calls == {"before": 1, "after": 1}


def test_loop_reusing_a_name_gets_one_row_per_iteration(workflows_env):
    instance = start("loop", {"n": 4})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == 0 + 1 + 2 + 3
    assert list(Step.objects.filter(instance_id=instance.pk).values_list("key", flat=True)) == [
        "item-1", "item-2", "item-3", "item-4"
    ]


@pytest.mark.parametrize(
    "backoff, gaps",
    [("constant", [10, 10, 10]), ("linear", [10, 20, 30]), ("exponential", [10, 20, 40])],
)
def test_retry_delays_follow_the_backoff(workflows_env, backoff, gaps):
    config = {"retries": {"limit": 3, "delay": "10 seconds", "backoff": backoff}}
    instance = start("flaky", {"failures": 3, "config": config})
    workflows_env.run_until_idle()
    seen = []
    for expected in gaps:
        row = Instance.objects.get(pk=instance.pk)
        assert row.status == "waiting"
        seen.append(round((row.wake_at - workflows_env.now).total_seconds()))
        # One second short of the delay, nothing runs.
        workflows_env.advance(timedelta(seconds=expected - 1))
        assert Instance.objects.get(pk=instance.pk).status == "waiting"
        workflows_env.advance("1 second")
    assert seen == gaps
    assert instance.status() == {"status": "complete", "output": "ok", "error": None}
    step = Step.objects.get(instance_id=instance.pk)
    assert [a["success"] for a in step.attempts] == [False, False, False, True]
    assert step.attempts[0]["error"] == {"name": "ValueError", "message": "failure 1"}
    assert calls["flaky"] == 4


def test_five_retries_of_exponential_backoff_in_milliseconds(workflows_env):
    # The defaults: 5 retries, 10 s, exponential: 10+20+40+80+160 s of waiting.
    instance = start("flaky", {"failures": 5})
    workflows_env.run_until_idle()
    workflows_env.advance("310 seconds")
    assert instance.status()["output"] == "ok"
    assert calls["flaky"] == 6


def test_exhausted_retries_error_the_instance_with_name_message_and_traceback(workflows_env):
    instance = start("flaky", {"failures": 10, "config": {"retries": {"limit": 2, "delay": 1000}}})
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    workflows_env.advance("2 seconds")
    assert instance.status() == {
        "status": "errored", "output": None, "error": {"name": "ValueError", "message": "failure 3"}
    }
    assert calls["flaky"] == 3
    row = Instance.objects.get(pk=instance.pk)
    assert "ValueError: failure 3" in row.traceback
    assert Step.objects.get(instance_id=instance.pk).status == StepStatus.FAILED


def test_uncaught_error_with_no_retries(workflows_env):
    instance = start("uncaught")
    workflows_env.run_until_idle()
    assert instance.status()["error"] == {"name": "RuntimeError", "message": "it broke"}
    assert calls["boom"] == 1


def test_caught_failure_and_non_retryable_replay_identically(workflows_env):
    instance = start("non-retryable")
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    workflows_env.advance("2 seconds")
    expected = [["declined", "card declined"], ["refused", "not today"]]
    assert instance.status() == {"status": "complete", "output": expected, "error": None}
    # limit 2 -> 3 attempts of charge; NonRetryableError stops refuse after one.
    assert calls == {"charge": 3, "compensate": 1, "refuse": 1}

    # Replay the finished journal: the same exceptions are raised again from the journal,
    # caught by the same except clauses, and no step function is called.
    Instance.objects.filter(pk=instance.pk).update(status="queued")
    calls.clear()
    workflows_env.executor.enqueue_replay(instance.pk)
    workflows_env.run_until_idle()
    assert instance.status()["output"] == expected
    assert calls == {}


def test_an_attempt_past_its_timeout_fails_and_is_retried(workflows_env):
    instance = start("slow")
    workflows_env.run_until_idle()
    step = Step.objects.get(instance_id=instance.pk)
    assert step.status == StepStatus.RETRYING
    assert step.attempts[0]["error"]["name"] == "StepTimeoutError"
    assert "timeout" in step.attempts[0]["error"]["message"]
    workflows_env.advance("1 second")
    assert instance.status()["output"] == "fast enough"
    assert calls["slow"] == 2


@pytest.mark.parametrize(
    "params, message",
    [
        ({"kind": "object"}, "Step 'bad' returned a value that is not JSON-serializable"),
        ({"kind": "nan"}, "Step 'nan' returned a value that is not JSON-serializable"),
        ({"kind": "big", "size": 2 * 1024 * 1024}, "over the limit of 1048576 bytes"),
        ({"kind": "output"}, "The output of run() is not JSON-serializable"),
    ],
)
def test_results_that_cannot_be_journaled_fail_the_step(workflows_env, params, message):
    instance = start("bad-result", params)
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "StepResultError"
    assert message in status["error"]["message"]
    if params["kind"] != "output":
        # Not retried: a value that cannot be stored will not become storable.
        step = Step.objects.get(instance_id=instance.pk)
        assert len(step.attempts) == 1


def test_result_size_limit_is_settable(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "MAX_STEP_RESULT_SIZE": 100}
    instance = start("bad-result", {"kind": "big", "size": 200})
    workflows_env.run_until_idle()
    assert "over the limit of 100 bytes" in instance.status()["error"]["message"]


def test_first_run_sees_the_value_a_replay_would_see(workflows_env):
    instance = start("bad-result", {"kind": "tuple"})
    workflows_env.run_until_idle()
    # A tuple is journaled tagged as one; the first run gets the tuple read back from its journal form.
    output = instance.status()["output"]
    assert output == (1, 2) and type(output) is tuple


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"retry": {}}, "unknown config key(s) ['retry']"),
        ({"retries": {"limit": -1}}, "retries.limit must be a whole number"),
        ({"retries": {"limit": 1.5}}, "retries.limit must be a whole number"),
        ({"retries": {"delay": "soon"}}, "cannot parse 'soon'"),
        ({"retries": {"delay": -5}}, "is negative"),
        ({"retries": {"backoff": "random"}}, "retries.backoff must be one of"),
        ({"retries": {"tries": 3}}, "unknown retries key(s) ['tries']"),
        ({"timeout": "0 seconds"}, "timeout must be more than zero"),
        ("fast", "config must be a dict"),
    ],
)
def test_bad_config_is_a_clear_error_naming_the_step(workflows_env, config, fragment):
    instance = start("bad-config", {"config": config})
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "WorkflowConfigError"
    assert "step 'configured'" in error["message"]
    assert fragment in error["message"]
    assert not Step.objects.filter(instance_id=instance.pk).exists()


def test_default_step_config_is_settable(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {
        "DEFAULT_STEP_CONFIG": {"retries": {"limit": 1, "delay": "1 second", "backoff": "constant"},
                                "timeout": "1 minute"}
    }
    instance = start("flaky", {"failures": 5})
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")
    assert instance.status()["status"] == "errored"
    assert calls["flaky"] == 2
    assert Step.objects.get(instance_id=instance.pk).config == {
        "retries": {"limit": 1, "delay": 1000, "backoff": "constant"}, "timeout": 60000
    }


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"what": "name", "value": ""}, "A step name must be a string of 1 to 256 characters"),
        ({"what": "name", "value": "x" * 257}, "A step name must be a string of 1 to 256 characters"),
        ({"what": "fn"}, "fn must be callable"),
    ],
)
def test_bad_step_calls(workflows_env, params, fragment):
    instance = start("bad-call", params)
    workflows_env.run_until_idle()
    assert fragment in instance.status()["error"]["message"]


def test_step_names_of_256_characters_are_accepted(workflows_env):
    from django_workflows.engine.step import WorkflowStep  # noqa: F401

    instance = start("bad-call", {"what": "name", "value": "n" * 256})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "unreachable"
    assert Step.objects.get(instance_id=instance.pk).key == "n" * 256 + "-1"
