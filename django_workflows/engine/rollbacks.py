"""Rollbacks (sagas): the undo declared beside a step, run when the instance fails.

A step declares its undo in its config (``{"rollback": fn, "rollback_config": {...}}``, Cloudflare's
``rollback`` and ``rollbackConfig``) or with ``@step.with_rollback`` and ``@fn.undo``. Each step that
succeeds with one, on the first run or answered from the journal on a replay, is remembered; when
``run()`` fails (or calls ``step.rollback_all(error)``), the undos run last in, first out, each as a
durable step of its own named ``rollback <step name>``, with its own retries and timeout. An undo waiting
out a retry delay suspends the instance like any step; the next replay fails ``run()`` the same way,
finds the finished undos in the journal and goes on with the rest.

Two ways of writing a handler, told apart by its signature:

- Named (this project's form): every parameter it declares is one of ``output`` (the undone step's
  result), ``error`` (why the instance failed) and ``ctx`` (the undone step's context), and it receives
  those it declares, by name: ``def release(output)``, ``def refund(output, error, ctx)``, ``lambda: ...``.
- Positional (Cloudflare's Python SDK): any other signature, ``def undo(error, value)``, ``def undo(err,
  order)``, ``def undo(*args)``: it is called as Cloudflare calls it, ``undo(error, value)``, with the
  context as ``ctx=`` as well if it declares a parameter of that name.

A handler whose parameters are exactly ``(error, output)`` reads the same either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django_workflows.shared.definition import StepContext, StepIdentity, parameters
from django_workflows.shared.error_journal import USER_FAILURES, describe_error, instance_error
from django_workflows.errors import WorkflowConfigError
from django_workflows.models import StepStatus
from django_workflows.engine.policy import StepPolicy
from django_workflows.engine.step_host import StepHost
from django_workflows.store.journal import Entry

ROLLBACK_KEYS = ("rollback", "rollback_config", "rollbackConfig")
PREFIX = "rollback "


@dataclass(frozen=True)
class PendingUndo:
    """A step that succeeded with an undo, waiting to be rolled back if the instance fails."""

    step_name: str
    handler: Callable[..., Any]
    config: dict[str, Any] | None
    output: Any
    context: StepContext


def split_config(config: dict[str, Any], where: str
                 ) -> tuple[dict[str, Any] | None, Callable[..., Any] | None, dict[str, Any] | None]:
    """``config`` without its rollback keys, the undo handler and the undo's own step config."""
    handler = config.get("rollback")
    undo_config = config.get("rollback_config", config.get("rollbackConfig"))
    if handler is not None and not callable(handler):
        raise WorkflowConfigError(f"{where}: 'rollback' must be a function, got {type(handler).__name__}")
    if undo_config is not None and handler is None:
        raise WorkflowConfigError(f"{where}: 'rollback_config' configures a 'rollback', and there is none")
    if undo_config is not None and not isinstance(undo_config, dict):
        raise WorkflowConfigError(f"{where}: 'rollback_config' must be a step config dict, got "
                                  f"{type(undo_config).__name__}")
    rest = {key: value for key, value in config.items() if key not in ROLLBACK_KEYS}
    return rest or None, handler, undo_config


def outcome(undone: int, failed_step: str | None = None,
            error: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the instance's error records of its rollback."""
    if failed_step is None:
        return {"status": "complete", "undone": undone}
    return {"status": "failed", "undone": undone, "step": failed_step, "error": error}


NAMED_ARGUMENTS = frozenset({"output", "error", "ctx"})


def takes_named_arguments(fn: Callable[..., Any]) -> bool:
    """Whether an undo handler is written in the named form: it declares no parameter but ``output``,
    ``error`` and ``ctx``, and no ``*args`` or ``**kwargs`` (the module's docstring says why)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(parameter.name in NAMED_ARGUMENTS and parameter.kind not in (
        inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        for parameter in signature.parameters.values())


def call_undo(fn: Callable[..., Any], output: Any, error: BaseException | None, ctx: StepContext) -> Any:
    """Call an undo handler as its form asks: by name, or Cloudflare's ``(error, value)``."""
    if takes_named_arguments(fn):
        return call_with_named(fn, output=output, error=error, ctx=ctx)
    if "ctx" in parameters(fn)[2:]:
        return fn(error, output, ctx=ctx)
    return fn(error, output)


def call_with_named(fn: Callable[..., Any], **available: Any) -> Any:
    """Call ``fn`` with those of ``available`` it declares by name (a handler's ``output``, ``error`` and
    ``ctx``), so a handler declares only what it reads."""
    names = parameters(fn)
    return fn(**{name: value for name, value in available.items() if name in names})


# How a step is run (``DoSteps.do``): an undo runs as a step of its own.
RunStep = Callable[[str, Callable[..., Any], "dict[str, Any] | None"], object]
# An undo step to run, ``(name, fn, config)``, as ``UndoSteps.rollback_steps`` yields it.
UndoCall = tuple[str, Callable[[], Any], "dict[str, Any] | None"]
UndoRun = Generator[UndoCall, None, list[str]]


def step_context(name: str, key: str, attempt: int, policy: StepPolicy) -> StepContext:
    """The context a step's body (or its undo) receives: its name and count, attempt and config."""
    # The count is the key's ("<name>-<count>"): steps run side by side may share a name.
    return StepContext(StepIdentity(name, int(key.rpartition("-")[2])), attempt, policy.as_config())


class UndoSteps:
    """The replay's side of undos: remembering each step that succeeded with one, and running them,
    each as a step (the ``run_step`` it is given)."""

    __slots__ = ("host", "pending", "undoing", "rolling_back", "running")

    def __init__(self, host: StepHost):
        self.host = host
        # Steps that succeeded with an undo, in the order they succeeded; the undo step running.
        self.pending: list[PendingUndo] = []
        self.undoing: str | None = None
        # The undos of a failed or terminated run() are running (the replay's own rollback), or an
        # undo is (any rollback): see undos_running.
        self.rolling_back = False
        self.running = False

    def stops_at(self, entry: Entry | None) -> bool:
        """Whether run(), being stopped (terminated with rollback, or past its deadline), stops at a step so
        journaled: before anything new runs, sleeps or waits, the undos of what ran come next."""
        return not self.rolling_back and (
            entry is None or entry.status not in (StepStatus.SUCCEEDED, StepStatus.FAILED))

    def remember(self, name: str, key: str, handler: Callable[..., Any], undo_config: dict[str, Any] | None,
                 output: Any, policy: StepPolicy, attempt: int) -> None:
        self.pending.append(PendingUndo(name, handler, undo_config, output,
                                        step_context(name, key, attempt, policy)))

    def next_undo(self, error: BaseException | None
                  ) -> tuple[str, str, Callable[[], Any], dict[str, Any] | None] | None:
        """The last remembered undo as a step, ``(step name, undo's name, fn, config)``, taken off the
        list; None when every undo ran."""
        if not self.pending:
            return None
        pending = self.pending.pop()

        def undo() -> Any:
            return call_undo(pending.handler, pending.output, error, pending.context)

        self.undoing = PREFIX + pending.step_name
        return pending.step_name, self.undoing, undo, pending.config

    def rollback_steps(self, error: BaseException | None, continue_on_error: bool) -> UndoRun:
        """The rollback as a sequence of undo steps to run, last remembered first: each ``(name, fn,
        config)`` it yields is a step to run, and the step's failure is thrown back into it; it returns
        the names of the steps undone, in that order. The first undo that fails for good stops the
        rollback and is raised (the undos of older steps do not run), or with ``continue_on_error`` the
        rest run and every failure is raised at the end, in an ``ExceptionGroup``.

        A generator, so that one loop serves the sync ``step.rollback_all`` (``run_undos``) and the
        async one, which awaits each step instead of calling it."""
        undone: list[str] = []
        failures: list[Exception] = []
        with self.undos_running():
            while (undo := self.next_undo(error)) is not None:
                step_name, name, fn, config = undo
                try:
                    yield name, fn, config
                except Exception as failure:
                    if not continue_on_error or self.host.fatal is not None:
                        raise
                    failures.append(failure)
                    continue
                undone.append(step_name)
        raise_failures(failures)
        return undone

    def rollback_all(self, error: BaseException | None, continue_on_error: bool, run_step: RunStep) -> list[str]:
        """Run the remembered undos, each through ``run_step``, as ``rollback_steps`` orders them."""
        undos = self.rollback_steps(error, continue_on_error)
        failure: BaseException | None = None
        while not isinstance(undo := resume(undos, failure), RolledBack):
            failure = failure_of(run_step, undo)
        return undo.undone

    def undo_all(self, error: BaseException, run_step: RunStep) -> dict[str, Any]:
        """The replay's own rollback, after run() failed or was terminated with rollback: run the
        remembered undos, last first, and return the rollback's outcome as the instance's error records
        it; an undo that must wait (a retry's delay) raises its ``Suspend``."""
        undone = len(self.pending)
        self.rolling_back = True
        try:
            self.rollback_all(error, False, run_step)
        except USER_FAILURES as undo_failure:
            fatal = self.host.fatal
            if fatal is not None:
                raise fatal from None
            # The undo that failed was taken off the list; those before it were undone.
            return outcome(undone - len(self.pending) - 1, failed_step=self.undoing,
                           error=instance_error(describe_error(undo_failure)))
        return outcome(undone)

    @contextmanager
    def undos_running(self) -> Iterator[None]:
        """Mark the undos as running while the body runs; an undo that calls ``step.rollback_all``
        meanwhile is refused (Cloudflare's SDK raises ``RuntimeError`` there too): it would take the
        next undo off the list from inside the one running."""
        if self.running:
            raise RuntimeError("step.rollback_all() was called while a rollback is running (from an undo "
                               "handler): an undo cannot start another rollback")
        self.running = True
        try:
            yield
        finally:
            self.running = False


@dataclass(frozen=True)
class RolledBack:
    """The end of a rollback: the names of the steps undone, in the order they were."""

    undone: list[str]


def resume(undos: UndoRun, failure: BaseException | None) -> UndoCall | RolledBack:
    """The rollback's next undo step, once the last one ended with ``failure`` (None: it succeeded), or
    its end. Every failure goes into the rollback, a ``Suspend`` too: its ``with`` must end."""
    try:
        return undos.send(None) if failure is None else undos.throw(failure)
    except StopIteration as finished:
        return RolledBack(finished.value)


def failure_of(run_step: RunStep, undo: UndoCall) -> BaseException | None:
    """Run one undo step; what it raised, or None."""
    try:
        run_step(*undo)
    except BaseException as failure:
        return failure
    return None


def raise_failures(failures: list[Exception]) -> None:
    """What ``rollback_all(continue_on_error=True)`` raises when undos failed."""
    if failures:
        raise ExceptionGroup(f"{len(failures)} undo(s) failed during rollback_all", failures)
