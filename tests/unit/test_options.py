"""A workflow class's options: read once per class, the settings applied at each read, and what the
system checks report found where the values are read."""

from datetime import timedelta

import pytest
from django.test import override_settings

from django_workflows import WorkflowEntrypoint
from django_workflows.surfaces import checks
from django_workflows.foundations.conf import HARD_STEP_LIMIT
from django_workflows.shared.definition import registry
from django_workflows.errors import WorkflowConfigError
from django_workflows.shared.options import WorkflowOptions, limited


@pytest.fixture
def define():
    """Define a workflow class for one test, unregistered afterwards (the other tests' checks would
    report it)."""
    made = []

    def make(class_name, base=WorkflowEntrypoint, **attributes):
        cls = type(class_name, (base,), {"run": lambda self, event, step: None, **attributes})
        made.append(cls)
        return cls

    yield make
    for cls in made:
        registry.unregister(cls)


def test_a_class_is_read_once_and_again_when_it_is_registered_again(define):
    cls = define("Counted", step_limit=5)
    options = WorkflowOptions.of(cls)
    assert WorkflowOptions.of(cls) is options
    cls.step_limit = 7
    assert WorkflowOptions.of(cls).step_limit == 5
    registry.register(cls)
    assert WorkflowOptions.of(cls).step_limit == 7


def test_a_subclass_has_options_of_its_own(define):
    base = define("Parent", step_limit=5, concurrency=2)
    WorkflowOptions.of(base)
    child = define("Child", base=base, step_limit=9)
    assert (WorkflowOptions.of(child).name, WorkflowOptions.of(child).step_limit) == ("child", 9)
    assert WorkflowOptions.of(child).limits.concurrency == 2
    assert WorkflowOptions.of(base).step_limit == 5


def test_values_that_follow_a_setting_see_it_change_after_the_class_was_read(define):
    options = WorkflowOptions.of(define("FollowsTheSettings"))
    assert options.step_limit == 10_000 and options.cpu_time_limit == timedelta(seconds=30)
    assert options.version == ""
    with override_settings(DJANGO_WORKFLOWS={"STEP_LIMIT": 7, "CPU_TIME_LIMIT": "2 seconds", "VERSION": 3}):
        assert (options.step_limit, options.cpu_time_limit, options.version) == (7, timedelta(seconds=2), "3")
    with override_settings(DJANGO_WORKFLOWS={"VERSION": "x" * 101}), \
            pytest.raises(WorkflowConfigError, match="VERSION"):
        options.version


def test_the_class_values_win_over_the_settings(define):
    options = WorkflowOptions.of(define("OwnValues", step_limit=40, cpu_time_limit="1 second", version=2))
    with override_settings(DJANGO_WORKFLOWS={"STEP_LIMIT": 7, "CPU_TIME_LIMIT": "2 seconds", "VERSION": "x"}):
        assert options.step_limit == 40 and options.cpu_time_limit == timedelta(seconds=1)
        assert options.version == "2"


def test_a_step_limit_above_the_hard_one_runs_as_the_hard_one_and_is_reported(define):
    options = WorkflowOptions.of(define("TooManySteps", step_limit=HARD_STEP_LIMIT + 1))
    assert options.step_limit == HARD_STEP_LIMIT
    assert [problem.id for problem in options.problems] == ["django_workflows.E018"]


def test_refused_values_are_problems_and_never_stop_the_class_from_being_read(define):
    cls = define(
        "WrongEverywhere", name="-wrong", step_limit="many", cpu_time_limit="forever", version="line\nbreak",
        approvals=5, events={"approve": {"schema": 42}}, schedules=["61 * * * *"], concurrency=0,
        rate_limit="lots",
    )
    options = WorkflowOptions.of(cls)
    assert [problem.id for problem in options.problems] == [
        "django_workflows.E018", "django_workflows.E019", "django_workflows.E020", "django_workflows.E007",
        "django_workflows.E010", "django_workflows.E013", "django_workflows.E021", "django_workflows.E026",
        "django_workflows.E027",
    ]
    # What can be done without is left out, as if not declared; the rest raises where it is needed.
    assert options.step_limit == 10_000 and options.limits is None and options.schedules == []
    assert options.approval_types == frozenset() and options.events["approve"].schema is None
    with pytest.raises(WorkflowConfigError, match=r"WrongEverywhere\.cpu_time_limit: cannot parse 'forever'"):
        options.cpu_time_limit
    with pytest.raises(WorkflowConfigError, match=r"WrongEverywhere\.version"):
        options.version
    # The system checks report exactly these, with nothing about run() to add.
    assert checks.check_workflows() == options.problems


def test_approval_types_are_the_named_and_the_declared_ones(define):
    cls = define("Approvals", approvals={"manager"}, events={"manager": {}, "finance": {"approval": True},
                                                             "paid": {"webhook": True}})
    assert WorkflowOptions.of(cls).approval_types == {"manager", "finance"}


def test_limited_lists_the_registered_workflows_that_declare_limits(define):
    assert "capped" not in limited()
    define("Capped", name="capped", concurrency=3, rate_limit="10/minute")
    define("WronglyCapped", name="wrongly-capped", concurrency=0)
    found = limited()
    assert (found["capped"].concurrency, str(found["capped"].rate)) == (3, "10/minute")
    assert "wrongly-capped" not in found


def test_limited_and_the_names_follow_the_registry_as_it_changes(define):
    """Both are worked out once per generation of the registry: a class registered, registered again
    with other limits, or unregistered is seen at the next call."""
    before = registry.names()
    assert "capped-later" not in limited() and "capped-later" not in before
    cls = define("CappedLater", name="capped-later", concurrency=3)
    assert limited()["capped-later"].concurrency == 3 and "capped-later" in registry.names()
    cls.concurrency = 5
    assert limited()["capped-later"].concurrency == 3  # an attribute changed is read again on re-registering
    registry.register(cls)
    assert limited()["capped-later"].concurrency == 5
    limited().clear()  # what a caller does with the dict it is given is its own
    registry.names().clear()
    assert "capped-later" in limited() and "capped-later" in registry.names()
    registry.unregister(cls)
    assert "capped-later" not in limited() and registry.names() == before


def test_the_cpu_time_limit_setting_is_read_again_when_it_changes(define):
    cls = define("Unlimited")
    with override_settings(DJANGO_WORKFLOWS={"CPU_TIME_LIMIT": 150}):
        assert WorkflowOptions.of(cls).cpu_time_limit == timedelta(milliseconds=150)
    with override_settings(DJANGO_WORKFLOWS={"CPU_TIME_LIMIT": "2 seconds"}):
        assert WorkflowOptions.of(cls).cpu_time_limit == timedelta(seconds=2)
    with override_settings(DJANGO_WORKFLOWS={"CPU_TIME_LIMIT": 0}):
        with pytest.raises(WorkflowConfigError, match="more than zero"):
            WorkflowOptions.of(cls).cpu_time_limit


def _problems(cls):
    return [(p.id, p.msg) for p in WorkflowOptions.of(cls).problems]


def test_keyed_limits_are_read_with_their_key(define):
    from django_workflows.shared.limits import LimitKey

    cls = define("Keyed", concurrency={"limit": 2, "key": "params.customer.id"},
                 rate_limit={"limit": "5/minute", "key": "params.customer.id"})
    own = WorkflowOptions.of(cls).limits
    assert (own.concurrency, str(own.rate), own.key, own.concurrency_keyed, own.rate_keyed) == (
        2, "5/minute", LimitKey("params.customer.id"), True, True)
    assert own.key.of({"customer": {"id": 7}}, {}, "keyed") == "7"
    assert own.lock_name("keyed", "7") == "keyed:7"
    # A rate limit of the whole workflow beside a keyed concurrency: claims serialize per workflow.
    mixed = WorkflowOptions.of(define("Mixed", concurrency={"limit": 1, "key": "tags.tenant"}, rate_limit="9/hour")).limits
    assert (mixed.concurrency_keyed, mixed.rate_keyed, mixed.lock_name("mixed", "acme")) == (True, False, "mixed")


@pytest.mark.parametrize("attributes, wrong", [
    ({"concurrency": {"limit": 2}}, "takes exactly the keys 'limit' and 'key'"),
    ({"concurrency": {"limit": 2, "key": "customer_id"}}, "must be a dotted path into the params or the tags"),
    ({"rate_limit": {"limit": "1/minute", "key": 5}}, "must be a dotted path"),
    ({"concurrency": {"limit": 2, "key": "params.a"}, "rate_limit": {"limit": "1/minute", "key": "params.b"}},
     "an instance has one limit key"),
])
def test_check_e041_refuses_a_key_it_cannot_use_and_leaves_the_limit_out(define, attributes, wrong):
    cls = define("BadKey", **attributes)
    [(problem_id, message)] = _problems(cls)
    assert problem_id == "django_workflows.E041" and wrong in message
    assert WorkflowOptions.of(cls).limits is None or WorkflowOptions.of(cls).limits.key is None


@pytest.mark.parametrize("attribute, value, problem_id, wrong", [
    ("priority", 10, "django_workflows.E042", "priority must be a whole number from 0"),
    ("priority", "high", "django_workflows.E042", "got 'high'"),
    ("queue", "heavy lifting", "django_workflows.E043", "queue must be a queue name"),
    ("queue", "", "django_workflows.E043", "got ''"),
])
def test_checks_refuse_a_priority_or_a_queue_they_cannot_take(define, attribute, value, problem_id, wrong):
    cls = define("BadRouting", **{attribute: value})
    [(found, message)] = _problems(cls)
    assert found == problem_id and wrong in message
    options = WorkflowOptions.of(cls)
    assert (options.priority, options.queue) == (0, "default")  # left out: the defaults apply


def test_a_class_names_its_priority_and_queue(define):
    options = WorkflowOptions.of(define("Routed", priority=4, queue="reports"))
    assert (options.priority, options.queue, options.problems) == (4, "reports", [])
