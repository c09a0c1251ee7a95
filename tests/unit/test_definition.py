"""Workflow definition, discovery, durations and the settings object."""

import subprocess
import sys
from datetime import timedelta

import pytest
from django.test import override_settings

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import kebab_case, registry
from django_workflows.shared.durations import parse_duration
from django_workflows.errors import InvalidStepInput, NonRetryableError, WorkflowError, WorkflowTimeoutError
from django_workflows.engine.policy import StepPolicy


@pytest.mark.parametrize("cls, name", [("PaymentApproval", "payment-approval"), ("HTTPCheck", "http-check"),
                                       ("Flaky", "flaky"), ("OrderSaga2", "order-saga2"),
                                       ("Under_Score", "under-score")])
def test_kebab_case(cls, name):
    assert kebab_case(cls) == name


def test_workflows_are_discovered_from_installed_apps_workflows_py():
    # tests/testapp/workflows.py is imported by the app's ready(), not by this test.
    assert {"three-steps", "payment-approval-free", "approval"} & set(workflows.names()) >= {"three-steps", "approval"}
    assert registry.get("three-steps").__module__ == "tests.testapp.workflows"


def test_name_can_be_set_and_abstract_bases_are_not_registered():
    class Base(WorkflowEntrypoint):
        abstract = True

    class Named(Base):
        name = "explicitly-named"

        def run(self, event, step):
            return None

    try:
        assert "explicitly-named" in workflows.names()
        assert all(cls is not Base for cls in registry.all())
        assert Named.abstract is False
    finally:
        registry.unregister(Named)


def test_importing_the_package_does_not_import_models():
    code = "import sys, django_workflows; print('django_workflows.models' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_api_and_version():
    import django_workflows

    assert django_workflows.__version__
    for name in django_workflows.__all__:
        assert getattr(django_workflows, name) is not None
    assert issubclass(WorkflowTimeoutError, WorkflowError)


def test_every_public_name_imports_from_the_package_and_every_error_is_public():
    import django_workflows
    from django_workflows import errors

    namespace = {}
    exec("from django_workflows import *", namespace)
    assert set(django_workflows.__all__) <= set(namespace)
    defined = {name for name, value in vars(errors).items()
               if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == errors.__name__}
    assert defined | {"StepFailed"} <= set(django_workflows.__all__)


def test_run_is_given_the_exported_workflow_step(workflows_env):
    from django_workflows import WorkflowStep

    seen = []

    class RecordsItsStep(WorkflowEntrypoint):
        name = "records-its-step"

        def run(self, event, step):
            seen.append(type(step))
            return step.do("one", lambda: 1)

    try:
        instance = workflows.get("records-its-step").create()
        workflows_env.run_until_idle()
    finally:
        registry.unregister(RecordsItsStep)
    assert instance.status()["output"] == 1
    assert seen and all(cls is WorkflowStep for cls in seen)


def test_errors_survive_pickling():
    import pickle

    error = WorkflowTimeoutError("late", step="approval-1")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is WorkflowTimeoutError and str(again) == "late" and again.step == "approval-1"
    assert isinstance(pickle.loads(pickle.dumps(NonRetryableError("x"))), NonRetryableError)


@pytest.mark.parametrize(
    "value, expected",
    [(1500, timedelta(milliseconds=1500)), ("10 seconds", timedelta(seconds=10)), ("1 second", timedelta(seconds=1)),
     ("2 minutes", timedelta(minutes=2)), ("72 hours", timedelta(hours=72)), ("1 day", timedelta(days=1)),
     ("3 weeks", timedelta(weeks=3)), ("1 month", timedelta(days=30)), ("1 year", timedelta(days=365)),
     ("250 milliseconds", timedelta(milliseconds=250)), ("1.5 hours", timedelta(minutes=90)),
     (timedelta(seconds=3), timedelta(seconds=3)), ("  5   Minutes ", timedelta(minutes=5))],
)
def test_durations(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["ten seconds", "10 parsecs", "", "-5 seconds", -1, None, True, [], float("nan")])
def test_bad_durations(value):
    with pytest.raises(InvalidStepInput):
        parse_duration(value)


def test_backoff_arithmetic():
    d = timedelta(seconds=1)
    policies = {b: StepPolicy(5, d, b, d) for b in ("constant", "linear", "exponential")}
    assert [policies["constant"].delay_after(n).seconds for n in (1, 2, 3)] == [1, 1, 1]
    assert [policies["linear"].delay_after(n).seconds for n in (1, 2, 3)] == [1, 2, 3]
    assert [policies["exponential"].delay_after(n).seconds for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert policies["constant"].max_attempts == 6


def test_settings_are_read_lazily_and_follow_override_settings():
    assert workflow_settings.STEP_LIMIT == 10_000
    with override_settings(DJANGO_WORKFLOWS={"STEP_LIMIT": 7}):
        assert workflow_settings.STEP_LIMIT == 7
    assert workflow_settings.STEP_LIMIT == 10_000
    with pytest.raises(AttributeError, match="Invalid django_workflows setting"):
        workflow_settings.NOT_A_SETTING  # noqa: B018


def test_the_executor_follows_settings():
    from django_workflows.executors import get_executor
    from django_workflows.executors.inline import InlineExecutor
    from django_workflows.executors.q2 import DjangoQExecutor

    assert isinstance(get_executor(), DjangoQExecutor)  # the default
    with override_settings(DJANGO_WORKFLOWS={"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}):
        assert isinstance(get_executor(), InlineExecutor)
    assert isinstance(get_executor(), DjangoQExecutor)


def test_an_error_journaled_under_a_class_the_package_moved_is_rebuilt_as_that_class():
    from django_workflows.shared.error_journal import StepFailed, describe_error, rebuild_error

    before_the_move = {"name": "StepFailed", "message": "card declined",
                       "type": "django_workflows.engine:StepFailed"}
    rebuilt = rebuild_error(before_the_move)
    assert type(rebuilt) is StepFailed and str(rebuilt) == "card declined"
    assert rebuild_error(describe_error(rebuilt)).args == rebuilt.args
