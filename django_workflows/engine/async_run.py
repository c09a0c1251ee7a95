"""``async def run(self, event, step)``: Cloudflare's Python SDK writes workflows as coroutines.

The journal, the keys and the guarantees are those of ``def run``. ``run()`` runs in an event loop of the
replay's own, so ``asyncio.gather``, ``asyncio.wait`` and ``asyncio.as_completed`` work on its steps:

    receipt, label = await asyncio.gather(step.do("charge", charge), step.do("print label", label))
    done, _ = await asyncio.wait([approval, reminder], return_when=asyncio.FIRST_COMPLETED)

Each step call takes its key when called (in the order run() calls them) and returns a future; nothing
touches the database while the loop runs. When every task waits, the replay settles the steps, in rounds:

- A round answers from the journal the steps it settled in that same round before (each journal row
  remembers its round, ``Step.settled_in``), so a replay hands run() the outcomes grouped and ordered
  as the first run did, and a race (``FIRST_COMPLETED``) is won by the same step on every replay.
- When the journal has nothing for this round, the steps run: step bodies side by side (first attempts
  each in a thread, as ``step.all``), then each is journaled, in the order they were called; sleeps that
  are due and waits whose event is in the inbox are settled too. Those that must wait (a sleep, a wait,
  a retry's delay) sit out the rest of this replay.
- When nothing more can be settled and run() still waits, the instance suspends until the earliest
  wake time or an event one of its waits takes (``Suspend`` is raised into run(), as in ``def run``).

``step.patched(change_id)`` is not awaited: it answers at once, as in ``def run``. What run() awaits
must come from its steps: a timer, a network call or a foreign future outside a step is refused with a
clear error. An ``async def`` step function runs in an event loop of its own, inside its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from django.core.exceptions import SynchronousOnlyOperation

from django_workflows.engine.child_steps import ChildWait, is_child_creator, wait_name
from django_workflows.engine.concurrent_steps import parse_calls
from django_workflows.foundations.control_flow import Suspend, Terminating
from django_workflows.shared.definition import WorkflowEvent, WorkflowStepEvent, parameters
from django_workflows.shared.error_journal import USER_FAILURES
from django_workflows.errors import WorkflowConfigError
from django_workflows.models import StepKind, StepStatus
from django_workflows.engine.rollbacks import RolledBack, resume
from django_workflows.engine.step import ReplaySteps, WorkflowStep
from django_workflows.engine.step_functions import StepFunction
from django_workflows.engine.step_host import PendingDo, StepHost
from django_workflows.store.journal import Entry

_UNEXAMINED = object()
# Rounds run() may go on after a suspension was raised into it (its finally blocks, a bare except that
# swallows it and calls more steps) before the loop is closed on it.
_SUSPENDED_ROUNDS = 100


class AsyncHost(ReplaySteps, StepHost, Protocol):
    """The replay as an async run() drives it: its steps, its bookkeeping, and the suspension a step
    asked for, which every later step raises again."""

    suspended: Suspend | None


class Called:
    """A step run() called, and the future it awaits."""

    __slots__ = ("kind", "name", "key", "arguments", "future", "entry", "parked")

    def __init__(self, kind: str, name: str, key: str, arguments: Any, future: asyncio.Future[Any]) -> None:
        # ``arguments``, by kind: ``(name, fn, config)`` for a step.do, the keywords of waits.sleep for a
        # sleep, ``(type, timeout)`` for a wait for an event, a ``ChildWait`` for a child's end.
        self.kind, self.name, self.key, self.arguments, self.future = kind, name, key, arguments, future
        # Its journal entry (or None) once looked up; _UNEXAMINED until then.
        self.entry: Any = _UNEXAMINED
        # The Suspend this step asked for in this replay: it sits out the rest of it.
        self.parked: Suspend | None = None

    def journaled(self) -> bool:
        """Whether the journal holds its final outcome."""
        if self.entry is None:
            return False
        entry: Entry = self.entry  # looked up by now
        if self.kind == StepKind.SLEEP:
            return entry.status == StepStatus.SUCCEEDED
        return entry.status in (StepStatus.SUCCEEDED, StepStatus.FAILED)


class EventLoopRun:
    """One replay of an ``async def run``: its event loop, and the steps called and not yet settled."""

    def __init__(self, replay: AsyncHost):
        self.replay = replay
        self.loop = asyncio.new_event_loop()
        self.called: list[Called] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.round = 0

    def call(self, kind: str, name: str, arguments: Any) -> asyncio.Future[Any]:
        key = self.replay.next_key(name)
        future = self.loop.create_future()
        self.futures.append(future)
        self.called.append(Called(kind, name, key, arguments, future))
        return future

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``run()``'s coroutine to its end; return what it returns."""
        main = self.loop.create_task(coroutine)
        replay = self.replay
        # step.patched, set_tags and progress answer at once; a marker they must write waits until the
        # loop is idle, before any step called after it is settled.
        replay.markers.deferred = True
        try:
            suspended_rounds = 0
            while True:
                self._run_until_idle()
                replay.markers.write_pending()
                if main.done():
                    return _outcome(main)
                waiting = self.called = [called for called in self.called if not called.future.done()]
                if self.replay.suspended is not None:
                    # Suspended: run() may only unwind now (a step it calls waits with the rest).
                    suspended_rounds += 1
                    if not waiting or suspended_rounds > _SUSPENDED_ROUNDS:
                        raise self.replay.suspended
                    self._raise_into(waiting, self.replay.suspended)
                elif not waiting:
                    raise _not_a_step()
                elif not self._settle(waiting):
                    self.replay.suspended = _merged([called.parked for called in waiting if called.parked])
                    self._raise_into(waiting, self.replay.suspended)
        finally:
            replay.markers.deferred = False
            self._close()

    # Rounds.

    def _settle(self, waiting: list[Called]) -> bool:
        """Settle what this round can; False if nothing could be and run() must suspend."""
        for called in waiting:
            if called.entry is _UNEXAMINED:
                try:
                    called.entry = self.replay.lookup(called.key, called.kind)
                except (Terminating, *USER_FAILURES) as stop:
                    # Raised in run() at the step, as def run meets it: a stop, or a NonDeterminismError
                    # (the instance errors all the same; run()'s except and finally clauses run first).
                    self._raise_into([called], stop)
                    return True
        journaled = [called for called in waiting if called.parked is None and called.journaled()]
        if journaled:
            this_round = [c for c in journaled if c.entry.settled_in in (None, self.round)]
            if not this_round:
                # Settled in another round than this replay reaches it in: the code changed around it.
                first = min(c.entry.settled_in for c in journaled)
                this_round = [c for c in journaled if c.entry.settled_in == first]
            self._deliver([(called, *self._answer(called)) for called in this_round])
            return True
        live = [called for called in waiting if called.parked is None]
        if not live:
            return False
        writer = self.replay.writer
        writer.settled_in = self.round
        try:
            outcomes = self._run_live(live)
        finally:
            writer.settled_in = None
        if any(called.parked is not None and called.parked.pause for called in live):
            return False
        self._deliver(outcomes)
        return bool(outcomes)

    def _answer(self, called: Called) -> tuple[bool, object]:
        """``(True, value)`` or ``(False, error)`` from the journal, or by running it: one step, alone."""
        replay = self.replay
        try:
            if called.kind == StepKind.DO:
                name, fn, config = called.arguments
                answered, outcome = replay.steps.begin_do(name, fn, config, key=called.key)
                return True, outcome if answered else replay.steps.run_do(outcome)
            if called.kind == StepKind.SLEEP:
                replay.waits.sleep(called.name, key=called.key, **called.arguments)
                return True, None
            if isinstance(called.arguments, ChildWait):
                return True, replay.children.wait_for_child(called.name, called.arguments.created, key=called.key)
            event_type, timeout = called.arguments
            return True, replay.waits.wait_for_event(called.name, event_type, timeout, key=called.key)
        except USER_FAILURES as failure:
            return False, failure

    def _run_live(self, live: list[Called]) -> list[tuple[Called, bool, Any]]:
        """Settle the steps the journal does not answer, in the order called; the outcomes of those
        settled. Bodies run side by side first; each is journaled in its turn."""
        replay = self.replay
        outcomes: dict[Called, tuple[bool, Any]] = {}
        pending: dict[Called, PendingDo] = {}
        for called in live:
            if called.kind != StepKind.DO:
                continue
            name, fn, config = called.arguments
            try:
                answered, outcome = replay.steps.begin_do(name, fn, config, key=called.key)
            except Suspend as suspension:
                called.parked = suspension
                continue
            except USER_FAILURES as failure:
                outcomes[called] = (False, failure)
                continue
            if answered:
                outcomes[called] = (True, outcome)
            else:
                pending[called] = outcome
        # A child's create step runs in the replay's thread, in its turn: an insert, not work to overlap.
        side_by_side = [called for called in pending if not is_child_creator(pending[called].fn)]
        firsts = dict(zip(side_by_side, replay.concurrent.first_attempts_of([pending[c] for c in side_by_side])))
        for called in live:
            if called in outcomes or called.parked is not None:
                continue
            try:
                if called in pending:
                    outcomes[called] = (True, replay.steps.run_do(pending[called], firsts.get(called)))
                else:
                    outcomes[called] = self._answer(called)
            except Suspend as suspension:
                called.parked = suspension
            except USER_FAILURES as failure:
                outcomes[called] = (False, failure)
        return [(called, *outcomes[called]) for called in live if called in outcomes]

    def _deliver(self, outcomes: list[tuple[Called, bool, Any]]) -> None:
        for called, succeeded, value in outcomes:
            if succeeded:
                called.future.set_result(value)
            else:
                called.future.set_exception(value)
        self.round += 1

    def _raise_into(self, waiting: list[Called], exc: BaseException) -> None:
        for called in waiting:
            if not called.future.done():
                called.future.set_exception(exc)

    # The loop.

    def _run_until_idle(self) -> None:
        loop = self.loop
        while True:
            loop.call_soon(loop.stop)
            loop.run_forever()
            # asyncio's queue of ready callbacks: empty when every task waits on a future.
            if not loop._ready:  # type: ignore[attr-defined]  # asyncio has no public way to ask
                return

    def _close(self) -> None:
        loop = self.loop
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            try:
                self._run_until_idle()
            except BaseException:  # noqa: BLE001 - what a cancelled task raises on its way out is moot now
                pass
        for future in self.futures:
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: no "exception never retrieved" in the log
        loop.close()


def _outcome(main: asyncio.Task[Any]) -> Any:
    """What run() returned; what it raised, raised again, Django's refusal of a database call made
    outside a step explained."""
    try:
        return main.result()
    except SynchronousOnlyOperation as exc:
        raise WorkflowConfigError(
            "async def run() used the database outside a step (a query, or transaction.atomic()), which "
            "Django refuses in an event loop. What reads or writes the database belongs in a step, where it "
            "is journaled: step.do(name, fn) with fn doing it (fn may open transaction.atomic() itself, or "
            "use atomic=True)."
        ) from exc


def _merged(suspensions: list[Suspend]) -> Suspend:
    """One suspension for several steps waiting at once: a pause first; else until the earliest wake
    time, or until an event any of them waits for."""
    paused = [suspension for suspension in suspensions if suspension.pause]
    if paused:
        return paused[0]
    timed = [suspension for suspension in suspensions if suspension.wake_at is not None]
    earliest = min(timed, key=lambda suspension: cast(datetime, suspension.wake_at)) if timed else suspensions[0]
    types = []
    for suspension in suspensions:
        types += [t for t in suspension.waiting_for or () if t not in types]
    return Suspend(step_key=earliest.step_key, wake_at=earliest.wake_at, waiting_for=types or None,
                   reason="event" if types else earliest.reason)


class AsyncStepFunction(StepFunction):
    """A decorated step function of an async run(): calling it returns a coroutine, which awaits the
    steps it depends on (side by side with ``concurrent=True``), then its own."""

    def __call__(self, *args: Any, **kwargs: Any) -> Coroutine[Any, Any, Any]:
        return self._call(args, kwargs)

    async def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.refuse_without_undo()
        names = parameters(self.func)
        given = set(names[: len(args)]) | set(kwargs)
        unresolved = [d for _, d in self.dependencies(names, given) if not d._results]
        if self.concurrent and len(unresolved) > 1:
            await asyncio.gather(*(dependency() for dependency in unresolved))
        else:
            for dependency in unresolved:
                await dependency()
        value = await self._step._run_do(*self.prepare(args, kwargs))
        self._results.append(value)
        return value


class AsyncWorkflowStep(WorkflowStep):
    """The ``step`` an ``async def run`` receives: the same calls, each returning an awaitable."""

    __slots__ = ("_loop_run",)

    step_function_class = AsyncStepFunction

    def __init__(self, replay: AsyncHost, loop_run: EventLoopRun):
        super().__init__(replay)
        self._loop_run = loop_run

    # WorkflowStep's calls, each returning an awaitable of what WorkflowStep's returns: overrides mypy
    # refuses (an awaitable of a list is no list), as it does rollback_all's coroutine below.

    def _run_do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None
                ) -> asyncio.Future[Any]:
        return self._loop_run.call(StepKind.DO, name, (name, fn, config))

    def all(self, calls: Sequence[Sequence[Any]]) -> asyncio.Future[list[Any]]:  # type: ignore[override]
        return asyncio.gather(*(self._run_do(name, fn, config) for name, fn, config in parse_calls(calls)))

    def sleep(self, name: str, duration: int | float | str | timedelta  # type: ignore[override]
              ) -> asyncio.Future[None]:
        return self._loop_run.call(StepKind.SLEEP, name, {"duration": duration})

    def sleep_until(self, name: str, timestamp: datetime | int | float  # type: ignore[override]
                    ) -> asyncio.Future[None]:
        return self._loop_run.call(StepKind.SLEEP, name, {"until": timestamp})

    def wait_for_event(self, name: str, type: str | Sequence[str],  # type: ignore[override]  # noqa: A002
                       timeout: int | float | str | timedelta = "24 hours"
                       ) -> asyncio.Future[WorkflowStepEvent]:
        return self._loop_run.call(StepKind.WAIT, name, (type, timeout))

    def child(self, name: str, workflow: str, params: Any = None, id: str | None = None,  # noqa: A002
              on_parent_end: str = "terminate") -> asyncio.Task[Any]:
        # The create step takes its key now, as any step called; the wait takes its own once it is known.
        create = self._replay.children.child_creator(name, workflow, params, id, on_parent_end)
        creating = self._loop_run.call(StepKind.DO, name, (name, create, None))

        async def child_result() -> Any:
            created = await creating
            return await self._loop_run.call(StepKind.WAIT, wait_name(created), ChildWait(created))

        # A task, not a bare coroutine: it waits for the child even if run() has not awaited it yet (and
        # a replay that ends first leaves no coroutine never awaited behind).
        task = self._loop_run.loop.create_task(child_result())
        self._loop_run.futures.append(task)
        return task

    async def rollback_all(self, error: BaseException | None = None, *,  # type: ignore[override]  # awaited
                           continue_on_error: bool = False) -> list[str]:
        # The sync rollback's loop (UndoSteps.rollback_steps), each undo step awaited.
        undos = self._replay.undos.rollback_steps(error, continue_on_error)
        failure: BaseException | None = None
        while not isinstance(undo := resume(undos, failure), RolledBack):
            try:
                await self._run_do(*undo)
                failure = None
            except BaseException as raised:
                failure = raised
        return undo.undone


def drive(replay: AsyncHost, run: Callable[..., Any], event: WorkflowEvent) -> Any:
    """Run ``run(event, step)``, an ``async def``, to its end in an event loop of its own; return what it
    returns."""
    loop_run = EventLoopRun(replay)
    return loop_run.run(run(event, AsyncWorkflowStep(replay, loop_run)))


def _not_a_step() -> WorkflowConfigError:
    return WorkflowConfigError(
        "run() awaited something that is not a step, and nothing else was left to run: an async run() may "
        "await only its steps (step.do, step.sleep, step.sleep_until, step.wait_for_event, step.child, a step "
        "function), and asyncio.gather, asyncio.wait or asyncio.as_completed of them. A timer "
        "(asyncio.sleep with a delay), a network call or a foreign future belongs inside a step (an async "
        "def step function runs in an event loop of its own), where its outcome is journaled."
    )
