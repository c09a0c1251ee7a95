"""``async def run(self, event, step)``: Cloudflare's Python SDK writes workflows as coroutines.

The journal, the keys and the guarantees are those of ``def run``: each ``await step.do(...)`` (and sleep,
sleep_until, wait_for_event, and a decorated step function's call) runs, or answers from the journal,
when it is called, and the awaitable it returns already holds the answer. So the coroutine never waits
for an event loop: the replay drives it step by step in its own thread, and a step that must wait
suspends it as it suspends ``def run``. A step function may itself be ``async def``; it runs to the end
in an event loop of its own, inside the step's timeout.

What needs a running loop in ``run()`` itself (``asyncio.gather``, ``asyncio.sleep``, a network call
awaited outside a step) is refused with a clear error: do such work inside a step, and run steps one
after another.
"""

from __future__ import annotations

from django_workflows.errors import WorkflowConfigError
from django_workflows.step import WorkflowStep
from django_workflows.step_functions import StepFunction


class Settled:
    """An awaitable that already holds its value (the step ran, or was answered, when called)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # a generator, as __await__ must return an iterator; it never yields


class AsyncStepFunction(StepFunction):
    def __call__(self, *args, **kwargs):
        return Settled(super().__call__(*args, **kwargs))


class AsyncWorkflowStep(WorkflowStep):
    """The ``step`` an ``async def run`` receives: the same calls, each returning an awaitable."""

    __slots__ = ()

    def do(self, name=None, fn=None, *, config=None, depends=None, concurrent=False):
        result = super().do(name, fn, config=config, depends=depends, concurrent=concurrent)
        return result if fn is None else Settled(result)

    def all(self, calls):
        return Settled(super().all(calls))

    def sleep(self, name, duration):
        return Settled(super().sleep(name, duration))

    def sleep_until(self, name, timestamp):
        return Settled(super().sleep_until(name, timestamp))

    def wait_for_event(self, name, type, timeout="24 hours"):  # noqa: A002
        return Settled(super().wait_for_event(name, type, timeout))

    def rollback_all(self, error=None):
        return Settled(super().rollback_all(error))

    step_function_class = AsyncStepFunction


def drive(coroutine):
    """Run ``run()``'s coroutine to its end in this thread, and return what it returns."""
    try:
        awaited = coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    except RuntimeError as exc:
        # What asyncio raises when run() reaches for the running loop there is none of (asyncio.sleep,
        # gather, create_task): the same mistake as awaiting a future.
        if "no running event loop" not in str(exc):
            raise
        raise _not_a_step("asyncio, which needs a running event loop") from None
    coroutine.close()
    raise _not_a_step(repr(awaited))


def _not_a_step(what: str) -> WorkflowConfigError:
    return WorkflowConfigError(
        f"run() awaited {what}, which is not a step: an async run() may await only its steps (step.do, "
        "step.sleep, step.sleep_until, step.wait_for_event, a step function). Do other asynchronous work "
        "inside a step (an async def step function runs in an event loop of its own), and run steps one "
        "after another, or side by side with await step.all([(name, fn), ...]) (not asyncio.gather)."
    )
