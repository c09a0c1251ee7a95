"""The async twins the engine suite runs (tests/flavours.py) are really async: each ``run`` is a coroutine
function, every step call in it is awaited and nothing else is, what cannot be rewritten is refused
saying why, and a step call an async run leaves un-awaited (which the engine cannot notice: the step
ran when called) fails the async flavour."""

from __future__ import annotations

import importlib
import inspect

import pytest

from django_workflows import WorkflowEntrypoint, workflows

from django_workflows.engine import async_run
from django_workflows.shared.definition import registry
from django_workflows.models import Instance
from tests.flavours import NotTransformable, async_twin, flavoured, is_twin, sync_only_reason, use_flavour
from tests.integration.conftest import ENGINE_SUITE

# Workflows of the engine suite (tests/testapp and the suite's modules) that have no async twin, by
# class, and why. None today: a workflow whose run() hands ``step`` to a helper, or calls a step where no
# await reaches, belongs here.
SYNC_ONLY: dict[str, str] = {}


def registered_classes():
    """The registered workflows of the engine suite: those of tests/testapp and of the suite's modules."""
    modules = {f"tests.integration.{module}" for module in ENGINE_SUITE}
    for module in modules:
        importlib.import_module(module)
    return [cls for cls in registry.all()
            if cls.__module__ in modules or cls.__module__.startswith("tests.testapp.")]


def unregistered(cls):
    registry.unregister(cls)
    return cls


def test_every_workflow_of_the_suite_has_an_async_twin_but_those_listed():
    refused = {f"{cls.__module__}.{cls.__qualname__}": reason for cls in registered_classes()
               if (reason := sync_only_reason(cls)) is not None}
    assert refused == SYNC_ONLY
    twins = {cls: async_twin(cls) for cls in registered_classes() if sync_only_reason(cls) is None}
    assert len(twins) > 40
    for cls, twin in twins.items():
        assert inspect.iscoroutinefunction(twin.run), cls
        assert (twin.name, twin.__module__, twin.__qualname__) == (cls.name, cls.__module__, cls.__qualname__)
        assert twin is cls or (issubclass(twin, cls) and is_twin(twin))
    # The twins are served by use_flavour, never registered: the registry and its checks see the originals.
    assert not any(is_twin(cls) for cls in registry.all())


def test_flavoured_gives_the_class_or_its_twin():
    from tests.testapp.workflows import ThreeSteps

    assert flavoured(ThreeSteps, "sync") is ThreeSteps
    assert flavoured(ThreeSteps, "async") is async_twin(ThreeSteps) is not ThreeSteps
    with pytest.raises(ValueError, match="flavour is one of"):
        flavoured(ThreeSteps, "threaded")


@unregistered
class EveryForm(WorkflowEntrypoint):
    def run(self, event, step):
        @step.do()
        def reserve():
            return 1

        @step.with_rollback("charge")
        def charge(reserve):
            return reserve

        @charge.undo
        def refund(output, error):
            return None

        declared = step.do("declared")(lambda: 2)
        first = reserve()
        step.sleep("nap", "1 minute")
        step.sleep_until("later", event.payload["at"])
        got = step.wait_for_event("go", "go", timeout="1 hour")
        both = step.all([("a", lambda: 1), ("b", lambda: 2)])
        done = [step.do(f"item {n}", lambda n=n: n) for n in range(2)]
        try:
            charge()
            step.do("ship", fn=self.ship, config={"retries": {"limit": 0}})
        except RuntimeError as error:
            step.rollback_all(error)
        return [first, declared, got.payload, both, done, step.do("last", lambda: 3)]

    def ship(self):
        raise RuntimeError("no")


def test_every_step_call_is_awaited_and_nothing_else():
    assert async_twin(EveryForm).run.twin_source == '''async def run(self, event, step):

    @step.do()
    def reserve():
        return 1

    @step.with_rollback('charge')
    def charge(reserve):
        return reserve

    @charge.undo
    def refund(output, error):
        return None
    declared = step.do('declared')(lambda: 2)
    first = await reserve()
    await step.sleep('nap', '1 minute')
    await step.sleep_until('later', event.payload['at'])
    got = await step.wait_for_event('go', 'go', timeout='1 hour')
    both = await step.all([('a', lambda: 1), ('b', lambda: 2)])
    done = [await step.do(f'item {n}', lambda n=n: n) for n in range(2)]
    try:
        await charge()
        await step.do('ship', fn=self.ship, config={'retries': {'limit': 0}})
    except RuntimeError as error:
        await step.rollback_all(error)
    return [first, declared, got.payload, both, done, await step.do('last', lambda: 3)]'''


def helper(step):
    return step.do("helped", lambda: 1)


@pytest.mark.parametrize("body, reason", [
    ("return helper(step)", "'step' is used otherwise than to call a step method"),
    ("return self.work(step)", "'step' is used otherwise than to call a step method"),
    ("do = step.do\n        return do('x', lambda: 1)",
     "'step' is used otherwise than to call a step method"),
    ("return getattr(step, 'do')('x', lambda: 1)", "'step' is used otherwise than to call a step method"),
    ("def inner():\n            return step.do('x', lambda: 1)\n        return inner()",
     "'step' is used inside a nested function"),
    ("return step.do('x', lambda: step.do('y', lambda: 1))", "'step' is used inside a nested function"),
    ("return sum(step.do(f'{n}', lambda: 1) for n in range(2))", "a step called in a generator expression"),
    ("return step.do(*['x', lambda: 1])", "cannot be told apart from a declaration"),
])
def test_what_cannot_be_awaited_is_refused_saying_why(body, reason):
    namespace = {"WorkflowEntrypoint": WorkflowEntrypoint, "helper": helper}
    source = f"class Helped(WorkflowEntrypoint):\n    def run(self, event, step):\n        {body}\n"
    path = "<test_flavours>"
    import linecache

    linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    try:
        exec(compile(source, path, "exec"), namespace)
        cls = unregistered(namespace["Helped"])
        with pytest.raises(NotTransformable, match=reason):
            async_twin(cls)
        assert reason in sync_only_reason(cls)
        with use_flavour("async") as record:
            registry.register(cls)
            try:
                assert workflows.get("helped").workflow_class is cls  # served as it is, and noted
            finally:
                registry.unregister(cls)
        assert list(record.sync_only) == ["helped"]
    finally:
        del linecache.cache[path]


def test_a_lambda_run_is_refused():
    cls = unregistered(type("Lambda", (WorkflowEntrypoint,), {"run": lambda self, event, step: None}))
    with pytest.raises(NotTransformable, match="not written as a def statement"):
        async_twin(cls)


def test_the_twin_shares_the_original_s_closure(workflows_env):
    results = []
    factor = 2

    @unregistered
    class Closing(WorkflowEntrypoint):
        name = "closing"

        def run(self, event, step):
            return step.do("times", lambda: results.append(factor) or factor * 10)

    twin = async_twin(Closing)
    assert twin.run.__code__.co_freevars == ("factor", "results")
    factor = 3  # a later change of the cell is seen by both
    registry.register(Closing)
    try:
        with use_flavour("async") as record:
            instance = workflows.get("closing").create()
            workflows_env.run_until_idle()
    finally:
        registry.unregister(Closing)
    assert instance.status()["output"] == 30 and results == [3]
    assert record.async_runs == 1 and not record.unawaited()


def test_a_twin_s_traceback_names_the_original_s_lines(workflows_env):
    with use_flavour("async") as record:
        instance = workflows.get("uncaught").create()
        workflows_env.run_until_idle()
    assert record.async_runs == 1
    traceback = Instance.objects.get(pk=instance.pk).traceback
    assert 'tests/testapp/workflows.py", line' in traceback
    assert 'step.do("boom", boom, config={"retries": {"limit": 0}})' in traceback


@unregistered
class ForgetsToAwait(WorkflowEntrypoint):
    name = "forgets-to-await"

    async def run(self, event, step):
        step.do("forgotten", lambda: 1)  # runs all the same: the step ran when called
        return await step.do("awaited", lambda: 2)


def test_a_step_call_left_unawaited_is_caught_though_the_instance_completes(workflows_env):
    registry.register(ForgetsToAwait)
    try:
        with use_flavour("async") as record:
            instance = workflows.get("forgets-to-await").create()
            workflows_env.run_until_idle()
    finally:
        registry.unregister(ForgetsToAwait)
    # The engine cannot tell: the instance completes, the forgotten step journaled.
    assert instance.status()["output"] == 2
    assert [awaitable.value for awaitable in record.unawaited()] == [1]
    assert record.async_runs == 1


def test_the_async_flavour_runs_the_twins_and_awaits_every_step(workflows_env):
    with use_flavour("async") as record:
        assert is_twin(workflows.get("three-steps").workflow_class)
        instance = workflows.get("three-steps").create(params={"x": 1})
        workflows_env.run_until_idle()
    assert instance.status()["output"]["sum"] == 6
    assert record.async_runs == 1 and len(record.awaitables) == 3 and not record.unawaited()


def patchable_state():
    """The async path's module and its classes, attribute by attribute, and the registry's own attributes."""
    classes = {name: dict(vars(cls)) for name, cls in vars(async_run).items()
               if isinstance(cls, type) and cls.__module__ == async_run.__name__}
    return dict(vars(async_run)), classes, dict(vars(registry))


def test_use_flavour_puts_everything_back():
    before = patchable_state()
    with use_flavour("async"):
        assert patchable_state() != before
        assert is_twin(registry.get("three-steps"))
    assert patchable_state() == before
    assert not is_twin(registry.get("three-steps"))
    with use_flavour("sync"):
        assert patchable_state() == before and not is_twin(registry.get("three-steps"))
