"""Ordinary Python and Django code in run() cannot corrupt an instance: a transaction opened around
steps, a bare ``except:`` around a suspension, a step renamed, removed, inserted or reordered after
instances began (and ``workflows verify``, which finds such instances before a deploy), and definitions
that could only fail at a replay (``manage.py check``)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.management import call_command
from django.db import transaction

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.surfaces import checks
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Step

calls: Counter = Counter()
# What run() of the "evolving" workflow calls, as (kind, name); a test changes it between replays, as
# a deploy changes the code under instances that already began.
shape: list[tuple[str, str]] = []


def effect(name):
    def body():
        calls[name] += 1
        return name
    return body


class AtomicAroundSteps(WorkflowEntrypoint):
    def run(self, event, step):
        step.do("before", effect("before"))
        with transaction.atomic():
            step.do("inside", effect("inside"))
            step.sleep("nap", "1 minute")
        return "done"


class SwallowsASleep(WorkflowEntrypoint):
    def run(self, event, step):
        try:
            step.sleep("nap", "5 minutes")
        except BaseException:  # noqa: BLE001 - the point of the test
            pass
        return step.do("after", effect("after"))


class RetriesByHand(WorkflowEntrypoint):
    def run(self, event, step):
        def flaky():
            calls["flaky"] += 1
            if calls["flaky"] < 3:
                raise RuntimeError(f"failure {calls['flaky']}")
            return "paid"

        for _ in range(3):
            try:
                return step.do("charge", flaky, config={"retries": {"limit": 2, "delay": "1 minute"}})
            except:  # noqa: E722 - the point of the test
                continue
        return "gave up"


class Evolving(WorkflowEntrypoint):
    def run(self, event, step):
        for kind, name in list(shape):
            if kind == "do":
                step.do(name, effect(name))
            else:
                step.sleep(name, "1 minute")
        return "done"


CLASSES = (AtomicAroundSteps, SwallowsASleep, RetriesByHand, Evolving)
for _cls in CLASSES:
    registry.unregister(_cls)


@pytest.fixture
def user_code():
    calls.clear()
    shape.clear()
    for cls in CLASSES:
        registry.register(cls)
    yield
    for cls in CLASSES:
        registry.unregister(cls)
    calls.clear()
    shape.clear()


def row(instance) -> Instance:
    return Instance.objects.get(pk=instance.pk)


# -- a transaction opened in run() ----------------------------------------------------------------

def test_a_step_inside_an_atomic_block_of_run_errors_the_instance_before_its_body_runs(workflows_env, user_code,
                                                                                       flavour):
    instance = workflows.get("atomic-around-steps").create(id="atomic")
    workflows_env.run_until_idle()
    workflows_env.advance("10 minutes")
    found = row(instance)
    assert found.status == "errored"
    if flavour == "sync":
        assert found.error["name"] == "StepInTransaction"
        assert "transaction.atomic()" in found.error["message"]
        assert "inside the step's function" in found.error["message"]
    else:
        # In async def run, Django refuses the block itself (a database call in an event loop), before
        # any step inside it: the error says where it belongs.
        assert found.error["name"] == "WorkflowConfigError"
        assert "used the database outside a step" in found.error["message"]
        assert "transaction.atomic()" in found.error["message"]
    # The step before the block ran once; the one inside never did, and nothing loops.
    assert calls == Counter({"before": 1})
    assert list(Step.objects.filter(instance_id=instance.pk).values_list("key", flat=True)) == ["before-1"]


# -- a suspension swallowed ------------------------------------------------------------------------

def test_a_sleep_inside_a_bare_except_still_waits_and_the_instance_completes_after_it(workflows_env, user_code):
    instance = workflows.get("swallows-a-sleep").create(id="sleepy")
    workflows_env.run_until_idle()
    assert row(instance).status == "waiting"
    assert calls["after"] == 0
    workflows_env.advance("5 minutes")
    assert instance.status()["status"] == "complete" and instance.status()["output"] == "after"
    assert calls == Counter({"after": 1})


def test_a_retrying_step_inside_a_hand_written_retry_loop_stays_one_step(workflows_env, user_code):
    instance = workflows.get("retries-by-hand").create(id="by-hand")
    workflows_env.run_until_idle()
    # The first attempt failed and the step waits for its retry: the loop did not make new steps.
    assert row(instance).status == "waiting"
    workflows_env.advance("3 minutes")
    assert instance.status()["output"] == "paid"
    steps = list(Step.objects.filter(instance_id=instance.pk).values_list("key", "status"))
    assert steps == [("charge-1", "succeeded")]
    assert calls["flaky"] == 3


# -- code changed under instances that began --------------------------------------------------------

OLD = [("do", "reserve"), ("do", "charge"), ("sleep", "settle"), ("do", "ship")]


@pytest.mark.parametrize("change, new, expected, requested", [
    ("rename", [("do", "reserve"), ("do", "bill"), ("sleep", "settle"), ("do", "ship")], "charge-1", "bill-1"),
    ("removal", [("do", "charge"), ("sleep", "settle"), ("do", "ship")], "reserve-1", "charge-1"),
    ("insertion", [("do", "reserve"), ("do", "audit"), ("do", "charge"), ("sleep", "settle"), ("do", "ship")],
     "charge-1", "audit-1"),
    ("reorder", [("do", "charge"), ("do", "reserve"), ("sleep", "settle"), ("do", "ship")], "reserve-1",
     "charge-1"),
    ("kind change", [("do", "reserve"), ("sleep", "charge"), ("sleep", "settle"), ("do", "ship")], None, None),
])
def test_a_changed_step_order_errors_the_instance_before_any_new_side_effect(
        workflows_env, user_code, change, new, expected, requested):
    shape[:] = OLD
    instance = workflows.get("evolving").create(id=f"evolving-{change.replace(' ', '-')}")
    workflows_env.run_until_idle()
    assert row(instance).status == "waiting"
    before = Counter(calls)
    shape[:] = new
    workflows_env.advance("1 minute")
    found = row(instance)
    assert found.status == "errored", change
    assert found.error["name"] == "NonDeterminismError"
    if expected:
        assert f"{requested!r}" in found.error["message"] and f"{expected!r}" in found.error["message"]
    assert calls == before, f"{change}: a step body ran under the changed code"
    # Restarted under the new code, it runs from the top.
    instance.restart()
    workflows_env.advance("5 minutes")
    assert instance.status()["status"] == "complete"


def test_steps_appended_after_the_journaled_ones_are_allowed(workflows_env, user_code):
    shape[:] = OLD
    instance = workflows.get("evolving").create(id="evolving-append")
    workflows_env.run_until_idle()
    shape[:] = [*OLD, ("do", "notify")]
    workflows_env.advance("1 minute")
    assert instance.status()["status"] == "complete"
    assert calls == Counter({"reserve": 1, "charge": 1, "ship": 1, "notify": 1})


# -- definitions ------------------------------------------------------------------------------------

def check_ids(cls) -> list[str]:
    try:
        return [message.id for message in checks.check_workflows()]
    finally:
        registry.unregister(cls)


@pytest.mark.one_flavour("about the system checks of async def run itself: no workflow runs")
def test_an_async_run_passes_the_checks_and_an_async_generator_run_is_a_check_error():
    class AsyncRun(WorkflowEntrypoint):
        async def run(self, event, step):
            return None

    assert check_ids(AsyncRun) == []

    class AsyncGeneratorRun(WorkflowEntrypoint):
        async def run(self, event, step):
            yield None

    assert check_ids(AsyncGeneratorRun) == ["django_workflows.E012"]


@pytest.mark.one_flavour("about the system checks of a class's name: no workflow runs")
@pytest.mark.parametrize("name", ["my workflow!/x", "-leading-dash", "x" * 65, "", "tab\there"])
def test_a_workflow_name_the_api_cannot_address_is_a_check_error(name):
    cls = type("BadName", (WorkflowEntrypoint,), {"name": name, "run": lambda self, event, step: None})
    assert check_ids(cls) == ["django_workflows.E007"]


@pytest.mark.one_flavour("about the system checks of a class's name: no workflow runs")
def test_a_workflow_name_of_64_characters_is_fine():
    cls = type("LongName", (WorkflowEntrypoint,), {"name": "x" * 64, "run": lambda self, event, step: None})
    assert check_ids(cls) == []


class ControlCharacters(WorkflowEntrypoint):
    def run(self, event, step):
        return step.do(event.payload["name"], lambda: 1)


registry.unregister(ControlCharacters)


@pytest.mark.parametrize("name", ["tab\there", "new\nline", "bell\x07"])
def test_a_step_name_with_control_characters_is_refused(workflows_env, name):
    registry.register(ControlCharacters)
    try:
        instance = workflows.get("control-characters").create(params={"name": name})
        workflows_env.run_until_idle()
    finally:
        registry.unregister(ControlCharacters)
    error = instance.status()["error"]
    assert error["name"] == "InvalidStepInput" and "control characters" in error["message"]
    assert not Step.objects.filter(instance_id=instance.pk).exists()


@pytest.mark.one_flavour("runs manage.py check: no workflow runs")
def test_check_runs_without_the_optional_settings(settings, db):
    del settings.ROOT_URLCONF
    call_command("check")


# -- verifying unfinished instances against the code deployed now -----------------------------------

def verify_command(*args) -> tuple[int, str, str]:
    import io

    from django.core.management.base import CommandError

    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("workflows", "verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


def test_verify_names_the_instances_that_code_changed_since_they_began_would_break(workflows_env, user_code):
    import json

    from django_workflows.testing import verify_journal

    shape[:] = OLD
    old = workflows.get("evolving").create(id="began-under-old-code")
    workflows_env.run_until_idle()
    shape[:] = [("do", "reserve"), ("do", "bill"), ("sleep", "settle"), ("do", "ship")]
    current = workflows.get("evolving").create(id="began-under-new-code")
    workflows_env.run_until_idle()
    before = Counter(calls)
    journal_rows = Step.objects.count()

    code, out, err = verify_command()
    assert code == 1
    assert "began-under-old-code" in out and "began-under-new-code" not in out
    assert "'charge-1'" in err and "'bill-1'" in err
    code, out, _ = verify_command("evolving", "--json")
    report = json.loads(out)
    assert code == 1 and report["verified"] == 2
    assert [(d["instance_id"], d["error"], d["step"], d["expected_step"]) for d in report["diverged"]] == [
        ("began-under-old-code", "NonDeterminismError", "bill-1", "charge-1")]
    assert verify_journal(old).expected_step == "charge-1" and verify_journal(current) is None
    # No step ran, nothing was written, both still wait.
    assert calls == before and Step.objects.count() == journal_rows
    assert {row(old).status, row(current).status} == {"waiting"}

    old.terminate()
    assert verify_command("evolving")[0] == 0
