"""The step API: ``WorkflowStep``, the ``step`` that ``run(event, step)`` is given.

A step found finished in the journal answers from it without running again: its result, or its error
raised again. A step not found runs (``step.do``), or starts waiting (a sleep, an event), and is
journaled. A step that must wait raises ``Suspend``, and the replay ends there. Each call goes to the
replay's collaborator for its kind of step (``ReplaySteps``), through the replay's ``call``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol, TypeVar, cast

from django_workflows.engine import child_steps, result_types
from django_workflows.engine.child_steps import ChildSteps
from django_workflows.engine.concurrent_steps import ConcurrentSteps
from django_workflows.shared.definition import WorkflowStepEvent
from django_workflows.engine.do_steps import DoSteps
from django_workflows.errors import InvalidStepInput, WorkflowError
from django_workflows.engine.markers import MarkerWriter
from django_workflows.engine.patches import PatchSteps
from django_workflows.engine.progress_steps import ProgressSteps
from django_workflows.engine.rollbacks import UndoSteps
from django_workflows.engine.step_functions import StepFunction
from django_workflows.engine.tag_steps import TagSteps
from django_workflows.foundations.validation import validate_step_name
from django_workflows.engine.waits import WaitSteps

T = TypeVar("T")


class ReplaySteps(Protocol):
    """The replay as ``step`` sees it: a collaborator per kind of step, and ``call``, which each step
    call goes through (it stops a replay that lost its lease, and remembers a suspension asked for)."""

    steps: DoSteps
    waits: WaitSteps
    children: ChildSteps
    patches: PatchSteps
    tags: TagSteps
    progress: ProgressSteps
    undos: UndoSteps
    concurrent: ConcurrentSteps
    # The writer of step.patched's, set_tags's and progress's markers, which an async run() defers.
    markers: MarkerWriter

    @property
    def fatal(self) -> WorkflowError | None:
        """The error that ends the instance whatever run() does with it, once one was raised."""

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def continue_as_new(self, params: Any) -> NoReturn: ...



class WorkflowStep:
    """The ``step`` argument of ``run(event, step)``."""

    __slots__ = ("_replay", "_declared", "_declared_steps")

    def __init__(self, replay: ReplaySteps):
        self._replay = replay
        # The step functions run() declared with the decorator forms, by function name: a later step
        # function's parameter of that name receives that step's result.
        self._declared: dict[str, StepFunction] = {}
        self._declared_steps: dict[str, StepFunction] = {}

    def do(self, name: str | None = None, fn: Callable[..., Any] | None = None, *,
           config: dict[str, Any] | None = None, depends: Sequence[StepFunction] | None = None,
           concurrent: bool = False, atomic: bool = False, result_type: Any = None) -> Any:
        """Run ``fn`` as a durable step named ``name``; or, without ``fn``, declare the decorated
        function as a step (``@step.do()`` names it after the function, ``@step.do("charge",
        depends=[reserve])`` runs ``reserve`` first and passes its result in), which its call runs.

        A function with a ``ctx`` parameter receives the step context (``StepContext``). ``config``
        may name an undo: ``{"rollback": fn, "rollback_config": {...}}`` (see ``rollback_all``).
        ``atomic=True`` (or ``config={"atomic": True}``) runs ``fn`` in a transaction of the workflow
        database that commits its journal row too: exactly once (``django_workflows.engine.atomic_steps``).
        ``result_type`` (or, without it, ``fn``'s return annotation) is the type ``run()`` gets the
        result as, on the first run and on every replay, when the value alone does not say
        (``django_workflows.engine.result_types``)."""
        if atomic:
            config = {**(config or {}), "atomic": True}
        if fn is None:
            if name is not None:
                validate_step_name(name)
            return lambda func: self._declare(name, func, result_types.declare(config, result_type), depends,
                                              concurrent)
        if depends or concurrent:
            raise InvalidStepInput(f"step.do({name!r}): depends and concurrent belong to the decorator form, "
                                   "@step.do(name, depends=[...])")
        # A name left out (None) is refused as the step takes its key (validate_step_name), as any name is.
        return self._run_do(cast(str, name), fn, result_types.declare(config, result_type))

    def with_rollback(self, name: str | None = None, config: dict[str, Any] | None = None, *,
                      depends: Sequence[StepFunction] | None = None, concurrent: bool = False,
                      undo: Callable[..., Any] | None = None, result_type: Any = None
                      ) -> Callable[[Callable[..., Any]], StepFunction]:
        """Declare a step with an undo (the Python SDK's form): ``@step.with_rollback("charge")``, then
        ``@charge.undo`` (or ``@charge.undo(config={...})``) on the function that undoes it, or the undo
        given at once, ``undo=refund``. ``depends`` and ``concurrent`` are those of ``step.do``. Calling
        the step before it has an undo raises ``ValueError``. ``result_type`` is that of ``step.do``."""
        if name is not None:
            validate_step_name(name)

        def declare(func: Callable[..., Any]) -> StepFunction:
            declared = self._declare(name, func, result_types.declare(config, result_type), depends,
                                     concurrent)
            declared.requires_undo = True
            if undo is not None:
                declared.undo(undo)
            return declared

        return declare

    def rollback_all(self, error: BaseException | None = None, *, continue_on_error: bool = False) -> list[str]:
        """Run the undos of every step that succeeded with one, last first, each as a durable step;
        ``error`` is what their handlers receive as ``error``; return the names of the steps undone. A
        failed ``run()`` calls it by itself. The first undo that fails for good stops the rollback and
        is raised here; with ``continue_on_error=True`` the others run, and the failures are raised at
        the end as an ``ExceptionGroup``. Called from an undo, it raises ``RuntimeError``."""
        replay = self._replay
        return replay.call(replay.undos.rollback_all, error, continue_on_error, replay.steps.do)

    def all(self, calls: Sequence[Sequence[Any]]) -> list[Any]:
        """Run ``step.do`` calls side by side (``[(name, fn), (name, fn, config), ...]``) and return their
        results in that order: ``Promise.all``. See ``django_workflows.engine.concurrent_steps``."""
        return self._replay.call(self._replay.concurrent.all_steps, calls)

    def sleep(self, name: str, duration: int | float | str | timedelta) -> None:
        """Wait ``duration`` (milliseconds, or "N unit(s)"), holding no worker."""
        self._replay.call(self._replay.waits.sleep, name, duration=duration)

    def sleep_until(self, name: str, timestamp: datetime | int | float) -> None:
        """Wait until ``timestamp`` (an aware datetime, or epoch seconds), holding no worker."""
        self._replay.call(self._replay.waits.sleep, name, until=timestamp)

    def wait_for_event(self, name: str, type: str | Sequence[str],  # noqa: A002
                       timeout: int | float | str | timedelta = "24 hours") -> WorkflowStepEvent:
        """Wait for an event of ``type`` (or of any type in a list), up to ``timeout``."""
        return self._replay.call(self._replay.waits.wait_for_event, name, type, timeout)

    def child(self, name: str, workflow: str, params: Any = None, id: str | None = None,  # noqa: A002
              on_parent_end: str = "terminate") -> Any:
        """Start an instance of ``workflow`` as this instance's child, and wait for its end: return its
        output, or raise its error here with its class (``InstanceTerminated`` if it was terminated).

        Two journaled steps: ``name`` creates the child (at most once, with ``id``, or an id derived from
        this instance's and the step's), ``"<key> (result)"`` waits for its end, holding no worker.
        ``on_parent_end``: what this instance's terminate, terminate(rollback=True) or restart does to
        the child while it runs: ``"terminate"`` (the same to the child) or ``"abandon"`` (nothing)."""
        replay = self._replay
        create = replay.children.child_creator(name, workflow, params, id, on_parent_end)
        created: Any = replay.call(replay.steps.do, name, create, None)
        return replay.call(replay.children.wait_for_child, child_steps.wait_name(created), created)

    def patched(self, change_id: str) -> bool:
        """Whether this instance runs the code that the change ``change_id`` guards: True on new
        instances and on those that had not reached this point when the change was deployed, False on
        those that had passed it on the code before. The answer is journaled (a marker, not a step), so
        every replay gets the same one. Not awaited, in ``async def run`` either. See
        ``django_workflows.engine.patches``."""
        return self._replay.call(self._replay.patches.patched, change_id)

    def deprecate_patch(self, change_id: str) -> None:
        """The patch ``change_id`` is in every instance still running: the code takes the new path
        without asking, and this keeps its marker journaled for new instances, which a worker still
        running code with ``step.patched(change_id)`` (a rolling deploy) needs to take the new path too.
        Once no such worker is left, remove the call: the markers journaled are then passed over."""
        self._replay.call(self._replay.patches.patched, change_id, deprecated=True)

    def set_tags(self, tags: dict[str, str | None] | None = None, /, **more: str | None) -> None:
        """Tag this instance, ``step.set_tags(stage="shipping")`` (or a dict): each value a string that
        lists filter on (``Instance.objects.tagged``, ``?tag.stage=shipping``), or None to remove the tag;
        other tags are kept. Journaled, so every replay sets the same; not a step, and not awaited in
        ``async def run``. See ``django_workflows.engine.tag_steps``."""
        self._replay.call(self._replay.tags.set_tags, {**(tags or {}), **more})

    def continue_as_new(self, params: Any = None) -> NoReturn:
        """End this instance and start its successor with ``params``: the same workflow, subject, tags,
        retention and timeout, the next id of its family (``order-7``, then ``order-7~2``...), linked both
        ways, with an empty journal. Both happen in one transaction, once run() has unwound (this call
        does not return; ``await`` it or not in ``async def run``). The instance ends ``complete``,
        output None, its ``successor`` set. For a workflow that loops for ever: each member of the family
        replays only its own journal, and none reaches the step limit. A child workflow cannot continue
        as new (``InvalidStepInput``); params that cannot be journaled raise ``InvalidParams``. See
        ``docs/how-to/deadlines-and-continue-as-new.md``."""
        self._replay.call(self._replay.continue_as_new, params)

    def progress(self, value: Any) -> None:
        """Report how far the instance has come: a small JSON value (``0.4``, ``{"done": 4, "total": 10}``,
        at most 4 KiB) that the admin's instance page, the API's instance detail and its event stream, and
        ``InstanceHandle.progress()`` show. Journaled (a marker, not a step), so a replay reports it once;
        not awaited in ``async def run``. See ``django_workflows.engine.progress_steps``."""
        self._replay.call(self._replay.progress.progress, value)

    step_function_class = StepFunction

    def _run_do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None) -> Any:
        return self._replay.call(self._replay.steps.do, name, fn, config)

    def _declare(self, name: str | None, func: Callable[..., Any], config: dict[str, Any] | None,
                 depends: Sequence[StepFunction] | None, concurrent: bool) -> StepFunction:
        if name is None:
            name = getattr(func, "__name__", None)
            if not name or name == "<lambda>":
                raise InvalidStepInput("@step.do() names the step after its function, and a lambda has no "
                                       "name: write @step.do('name')")
            validate_step_name(name)
        declared = self.step_function_class(self, name, func, config, depends, concurrent)
        self._declared[getattr(func, "__name__", name)] = declared
        # Cloudflare's SDK resolves a parameter by step name: the latest step of that name.
        self._declared_steps[name] = declared
        return declared
