"""What must not take the system down: workflows that raise SystemExit or KeyboardInterrupt, a broken
workflows.py, and finished instances piling up (retention)."""

from datetime import timedelta

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.checks import check_workflows
from django_workflows.definition import discover, registry
from django_workflows.dispatch import purge_finished
from django_workflows.models import Event, Instance, Step


class ExitsInAStep(WorkflowEntrypoint):
    def run(self, event, step):
        def leave():
            raise (SystemExit if event.payload["what"] == "exit" else KeyboardInterrupt)("bye")

        try:
            step.do("leave", leave)
        except Exception as exc:
            return {"caught": type(exc).__name__}


class ExitsInRun(WorkflowEntrypoint):
    def run(self, event, step):
        step.do("first", lambda: 1)
        raise (SystemExit if event.payload["what"] == "exit" else KeyboardInterrupt)()


@pytest.mark.parametrize("what", ["exit", "interrupt"])
def test_system_exit_or_keyboard_interrupt_in_a_step_fails_the_step_not_the_worker(workflows_env, what):
    instance = workflows.get("exits-in-a-step").create(params={"what": what})
    workflows_env.run_until_idle()
    # Not retried, and raised inside run() as an ordinary error that can be caught.
    assert instance.status()["output"] == {"caught": "StepFailed"}
    step = Step.objects.get(instance_id=instance.pk)
    assert len(step.attempts) == 1
    assert step.error["name"] == ("SystemExit" if what == "exit" else "KeyboardInterrupt")


@pytest.mark.parametrize("what", ["exit", "interrupt"])
def test_system_exit_or_keyboard_interrupt_in_run_errors_the_instance(workflows_env, what):
    instance = workflows.get("exits-in-run").create(params={"what": what})
    workflows_env.run_until_idle()
    assert instance.status()["error"]["name"] == ("SystemExit" if what == "exit" else "KeyboardInterrupt")


def test_a_workflows_module_that_fails_to_import_is_reported_and_the_rest_keep_working(workflows_env, tmp_path,
                                                                                     monkeypatch, settings):
    package = tmp_path / "brokenapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workflows.py").write_text("raise RuntimeError('syntax of the future')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "brokenapp"]
    try:
        discover()
        assert "brokenapp.workflows" in registry.import_errors
        [warning] = [m for m in check_workflows() if m.id == "django_workflows.W009"]
        assert "syntax of the future" in warning.msg
        # An instance of a workflow that lived there gets a clear error; the others run.
        instance = workflows.get("three-steps").create()
        Instance.objects.filter(pk=instance.pk).update(workflow_name="from-broken-app")
        other = workflows.get("three-steps").create()
        workflows_env.run_until_idle()
        error = Instance.objects.get(pk=instance.pk).error
        assert error["name"] == "WorkflowNotFound" and "brokenapp.workflows failed to import" in error["message"]
        assert other.status()["status"] == "complete"
    finally:
        registry.import_errors.pop("brokenapp.workflows", None)


def test_retention_deletes_old_finished_instances_in_batches(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 2}
    old = [workflows.get("three-steps").create() for _ in range(5)]
    waiting = workflows.get("approval").create()
    workflows_env.run_until_idle()
    waiting.send_event(type="unrelated", payload={})
    waiting.pause()  # live for the whole month
    workflows_env.advance("29 days")
    recent = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    assert purge_finished() == 0
    workflows_env.advance("2 days")
    assert purge_finished() == 5
    remaining = set(Instance.objects.values_list("pk", flat=True))
    # The live instance and the recent one are kept, with their journal and inbox.
    assert remaining == {waiting.pk, recent.pk}
    assert waiting.status()["status"] == "paused"
    assert not Step.objects.filter(instance_id__in=[i.pk for i in old]).exists()
    assert Event.objects.filter(instance_id=waiting.pk).count() == 1


def test_retention_can_be_switched_off(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": None}
    workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(days=400))
    assert purge_finished() == 0
