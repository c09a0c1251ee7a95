"""The decorator forms of ``step.do``, as Cloudflare's Python SDK writes them.

    @step.do()                                   # the step is named after the function
    def reserve():
        return inventory.reserve(order)

    @step.do("charge", depends=[reserve])        # runs reserve first, and passes its result in
    def charge(reserve, ctx):                    # ctx: the step context (attempt, name, count, config)
        return payments.charge(reserve["amount"], attempt=ctx.attempt)

    charge()

A parameter named after a step function declared earlier in ``run()`` (its function's name, or its step's
name: the latest step of that name) receives that step's result, running the step first if it has not
run in this replay; a parameter named ``ctx`` receives the step context. A step of ``depends`` that no
parameter is named after passes its result as Cloudflare's SDK does, positionally, in the order of
``depends``: to the positional parameters left over, first to last (``@step.do("total", depends=[a, b])
def total(result_a, result_b)``). Dependencies run one after another, in the order given, or with
``concurrent=True`` side by side (``step.all``: their keys and journal in that order whichever finishes
first).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, overload

from django_workflows.shared.declared_types import return_annotation
from django_workflows.shared.definition import StepContext, parameters
from django_workflows.engine import result_types
from django_workflows.errors import InvalidStepInput

CONTEXT_PARAMETER = "ctx"
# What an undo declared without a config takes from its step's: how it retries, and its timeout.
INHERITED_BY_UNDO = ("retries", "timeout")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# The replay as a step function reaches it: to run the steps it depends on side by side (step.all).
class _ConcurrentSteps(Protocol):
    def all_steps(self, calls: Any) -> list[Any]: ...


class _Replay(Protocol):
    @property
    def concurrent(self) -> _ConcurrentSteps: ...

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


class DeclaringStep(Protocol):
    """The ``step`` that declared a step function, as the function sees it (``WorkflowStep``, above this
    module): the step functions declared so far, the replay, and how a step call runs."""

    _declared: dict[str, StepFunction]
    _declared_steps: dict[str, StepFunction]

    @property
    def _replay(self) -> _Replay: ...

    def _run_do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None) -> Any: ...


def wants_context(fn: Callable[..., Any]) -> bool:
    return CONTEXT_PARAMETER in parameters(fn)


def positional_parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` that a positional argument may fill, and a keyword too."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in signature.parameters.values() if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD)


class StepFunction:
    """A function declared as a step by ``@step.do(...)`` or ``@step.with_rollback(...)``: calling it
    runs the step (answered from the journal on a replay)."""

    def __init__(self, step: DeclaringStep, name: str, func: Callable[..., Any],
                 config: dict[str, Any] | None, depends: Sequence[StepFunction] | None,
                 concurrent: bool) -> None:
        if not callable(func):
            raise InvalidStepInput(f"@step.do({name!r}) decorates a function, got {type(func).__name__}")
        for dependency in depends or ():
            if not isinstance(dependency, StepFunction):
                raise InvalidStepInput(
                    f"step {name!r}: depends lists step functions (declared with @step.do), got {dependency!r}"
                )
        self._step = step
        self.name = name
        self.func = func
        self.config = config
        self.depends = list(depends or ())
        self.concurrent = bool(concurrent)
        self.undo_handler: Callable[..., Any] | None = None
        self.undo_config: dict[str, Any] | None = None
        # Declared by step.with_rollback: calling it without an undo is a mistake, said at once.
        self.requires_undo = False
        self._results: list[Any] = []
        functools.update_wrapper(self, func)

    # The names Cloudflare's SDK keeps these under, which ported code (its own tests among it) reads.
    @property
    def _undo_handler(self) -> Callable[..., Any] | None:
        return self.undo_handler

    @property
    def _config(self) -> dict[str, Any] | None:
        return self.config

    @property
    def _undo_config(self) -> dict[str, Any] | None:
        return self.undo_config

    def __repr__(self) -> str:
        return f"<step function {self.name!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self._step._run_do(*self.prepare(args, kwargs))
        self._results.append(value)
        return value

    def dependencies(self, names: Sequence[str], given: set[str]) -> list[tuple[str | None, StepFunction]]:
        """The steps whose results this one takes, with the parameter each goes to (None: run first, not
        passed in): those of ``depends``, then those named by a parameter."""
        found = [(next((n for n in (d.func.__name__, d.name) if n in names and n not in given
                        and n != CONTEXT_PARAMETER), None), d) for d in self.depends]
        for name in names:
            if name in given or name == CONTEXT_PARAMETER:
                continue
            declared = self._step._declared.get(name) or self._step._declared_steps.get(name)
            if declared is not None and declared is not self and all(d is not declared for _, d in found):
                found.append((name, declared))
        return found

    def refuse_without_undo(self) -> None:
        if self.requires_undo and self.undo_handler is None:
            raise InvalidStepInput(
                f"step {self.name!r} is declared with step.with_rollback but has no undo: decorate its undo "
                f"with @{self.func.__name__}.undo, or pass undo=... to step.with_rollback (a step without an "
                "undo is declared with @step.do)"
            )

    def prepare(self, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                ) -> tuple[str, Callable[..., Any], dict[str, Any] | None]:
        """``(name, body, config)`` of this step's call, its dependencies resolved first: one after
        another, or side by side (``step.all``) with ``concurrent=True``."""
        self.refuse_without_undo()
        kwargs = dict(kwargs or {})
        names = parameters(self.func)
        given = set(names[: len(args)]) | set(kwargs)
        dependencies = self.dependencies(names, given)
        unresolved = [d for _, d in dependencies if not d._results]
        if self.concurrent and len(unresolved) > 1:
            replay = self._step._replay
            values = replay.call(replay.concurrent.all_steps, [d.prepare() for d in unresolved])
            for dependency, value in zip(unresolved, values):
                dependency._results.append(value)
        leftover: Iterator[str] | None = None
        for parameter, dependency in dependencies:
            value = dependency.result()
            if parameter is None:
                if leftover is None:
                    named = given | {p for p, _ in dependencies if p is not None} | {CONTEXT_PARAMETER}
                    leftover = iter([p for p in positional_parameters(self.func)[len(args):] if p not in named])
                parameter = next(leftover, None)
            if parameter is not None:
                kwargs[parameter] = value
        func = self.func
        if CONTEXT_PARAMETER in names and CONTEXT_PARAMETER not in given:
            def body(ctx: StepContext) -> Any:
                return func(*args, ctx=ctx, **kwargs)
        else:
            # No ctx parameter: how wants_context() tells the two apart.
            def body() -> Any:  # type: ignore[misc]
                return func(*args, **kwargs)
        config = self.config
        if config is None or result_types.CONFIG_KEY not in config:
            # The body called is a wrapper without annotations: the function's own return annotation
            # declares the result's type (engine.result_types).
            config = result_types.declare(config, return_annotation(func))
        if self.undo_handler is not None:
            config = {**(config or {}), "rollback": self.undo_handler}
            # An undo without a config of its own inherits the step's (Cloudflare's Python SDK).
            undo_config = self.undo_config if self.undo_config is not None else {
                key: value for key, value in (self.config or {}).items() if key in INHERITED_BY_UNDO} or None
            if undo_config is not None:
                config["rollback_config"] = undo_config
        return self.name, body, config

    def result(self) -> Any:
        """This step's result in this replay: the last call's, or the step run now if it has not been."""
        # The plain call, not an async step function's awaitable: a dependency's value is passed in.
        return self._results[-1] if self._results else StepFunction.__call__(self)

    @overload
    def undo(self, handler: None = None, *, config: dict[str, Any] | None = None) -> Callable[[F], F]: ...

    @overload
    def undo(self, handler: F, *, config: dict[str, Any] | None = None) -> F: ...

    def undo(self, handler: F | None = None, *, config: dict[str, Any] | None = None) -> F | Callable[[F], F]:
        """Declare the step's undo (``@charge.undo``): it runs, as a durable step of its own, when
        ``step.rollback_all(error)`` is called or ``run()`` fails after this step succeeded."""
        def declare(fn: F) -> F:
            if not callable(fn):
                raise InvalidStepInput(f"{self.name!r}.undo decorates a function, got {type(fn).__name__}")
            self.undo_handler, self.undo_config = fn, config
            return fn

        return declare if handler is None else declare(handler)
