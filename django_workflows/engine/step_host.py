"""What the step calls need from the replay they run in: ``StepHost``.

The replay (``replay.Replay``) is one object with collaborators, one per kind of step: ``DoSteps``
(``step.do``), ``WaitSteps`` (sleeps, waits for events), ``ChildSteps``, ``PatchSteps``, ``UndoSteps``
and ``ConcurrentSteps`` (``step.all``). Each receives the host and what else it needs when it is built,
and reaches the replay only through this protocol: the instance, the journal's writer, the lifecycle's
reporter, and the bookkeeping every step call goes through in the same order (take a key, look it up,
count it, write, then ``after_write``). Where a replay stands in the journal is the ``JournalCursor``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, NoReturn, Protocol

from django_workflows.errors import CpuTimeLimitExceeded, WorkflowError
from django_workflows.shared.iso_times import isoformat
from django_workflows.shared.lifecycle import Reporter
from django_workflows.engine.policy import StepPolicy
from django_workflows.store.journal import Entry, JournalWriter
from django_workflows.store.leases import Claim


class KeptRows(Protocol):
    """The watch over a replay's kept rows as a step sees it (``engine.step_rows.StepRows``)."""

    def watching(self) -> bool:
        """Whether the next succeeded step's row may be kept for the replay's next write."""


class StepHost(Protocol):
    """The replay as its step calls see it."""

    # The instance whose lease the replay holds, the writer of its journal rows (fenced by its epoch),
    # the lifecycle's signals and log records, and when the lease was taken (the database's clock).
    instance: Claim
    writer: JournalWriter
    report: Reporter
    started_at: datetime | None
    # The replay's OpenTelemetry span while it records (None with telemetry off, with no SDK configured,
    # or when the sampler dropped it): each step attempt's span is its child.
    span: Any
    # The key of the step whose body is running: no step may be called from inside it, and the engine
    # must not touch the journal until it returns (its timeout may interrupt it).
    running_step: str | None

    @property
    def rows(self) -> KeptRows:
        """The watch under which a succeeded step's row may wait for the replay's next write (``step_rows``)."""

    @property
    def fatal(self) -> WorkflowError | None:
        """The error that ends the instance whatever run() does with it, once one was raised."""

    def next_key(self, name: str) -> str:
        """Check that a step may be called here (``check_step_call``) and take its key."""

    def check_step_call(self, name: str) -> None:
        """Refuse a step or a ``step.patched`` called where run() may not call one (inside a transaction
        run() opened, inside another step's body, after a fatal error)."""

    def lookup(self, key: str, kind: str) -> Entry | None:
        """The journal's entry for the step, checked against the journal's order; raises
        ``Terminating`` at an unfinished step of an instance terminated with rollback."""

    def count_step(self, key: str, journaled: bool) -> None:
        """Count a ``step.do`` toward the workflow's step limit."""

    def after_write(self, status: str, key: str) -> None:
        """After a step's journal write, given the instance's status it returned: suspend if a pause
        was asked meanwhile."""

    def fail_fatally(self, exc: WorkflowError) -> NoReturn:
        """Raise ``exc`` and end the instance with it, even if run() catches it."""

    def count_cost(self, attempt: Attempt) -> None:
        """Add a step attempt's CPU and wall time to the replay's."""

    def cpu_time_exceeded(self, step: str) -> CpuTimeLimitExceeded | None:
        """The error that stops the replay before ``step`` if it is over its CPU time limit."""


@dataclass(slots=True)
class PendingDo:
    """A ``step.do`` the journal does not answer: what running and journaling it needs. Not frozen: a frozen
    dataclass sets each field through ``object.__setattr__``, and one is made for every step that runs."""

    name: str
    key: str
    entry: Entry | None
    fn: Callable[..., Any]
    config: dict[str, Any] | None
    policy: StepPolicy
    undo: Callable[..., Any] | None
    undo_config: dict[str, Any] | None
    result_type: Any = None
    """The type run() gets the result as (``result_type=``, or the function's return annotation)."""


class Attempt(NamedTuple):
    """What one attempt of a step's body came to, and what it cost."""

    started: datetime
    ended: datetime
    text: str | None
    """The result as journal JSON (None when it failed)."""
    value: object
    failure: BaseException | None
    cpu: float
    """Seconds of CPU time the body used, in the thread that ran it."""
    wall: float
    """Seconds the body took, end to end."""
    thread: int | None
    """The thread that ran the body (``threading.get_ident()``)."""
    trace: tuple[Any, int] | None = None
    """The attempt's span and when its body ended (``time.time_ns()``), with OpenTelemetry on; ended by
    ``DoSteps.run_do`` once the attempt's outcome (retried or not) is known."""

    def journaled(self, number: int) -> dict[str, Any]:
        """The attempt as ``Step.attempts`` keeps it (an error is added by the caller)."""
        return {"attempt": number, "start": isoformat(self.started), "end": isoformat(self.ended),
                "success": self.failure is None, "cpu_ms": _ms(self.cpu), "wall_ms": _ms(self.wall)}


def _ms(seconds: float) -> float:
    # To the microsecond: most steps take well under a millisecond of CPU.
    return round(seconds * 1000, 3)
