"""What a replay keeps that every part of the step API reads and writes.

The step API's side on the replay is one class (``step.JournaledSteps``, which ``replay.Replay`` is)
made of a class per kind of step, each in its own module (``waits``, ``patches``, ``children``,
``rollbacks``, ``concurrent_steps``). Each of those reads the replay's journal, its writer and its
bookkeeping, which ``Replay`` sets and defines: ``ReplayState`` declares them, so that each part is
checked against what the replay holds. It adds nothing at run time: the methods are declared for the
type checker only, and no attribute has a value here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from django_workflows.control_flow import Suspend
from django_workflows.definition import WorkflowStepEvent
from django_workflows.errors import CpuTimeLimitExceeded, WorkflowError
from django_workflows.lifecycle import Reporter
from django_workflows.store.journal import Entry, JournalWriter
from django_workflows.store.leases import Claim


class ReplayState:
    # The instance whose lease the replay holds, its journal (by step key), and the writer of its rows.
    instance: Claim
    journal: dict[str, Entry]
    writer: JournalWriter
    # The lifecycle's signals and log records; when the lease was taken (the database's clock).
    report: Reporter
    started_at: datetime | None
    # A fatal error, kept even if run() catches it; a suspension, raised again by every later step.
    fatal: WorkflowError | None
    suspended: Suspend | None
    # The workflow's declared events by type (None: any type).
    declared_events: dict[str, Any] | None
    # step.patched's answers by change id, and how many step keys run() has taken.
    patches: dict[str, bool]
    keys_taken: int
    # The markers an async run() asked for while its event loop ran, written once it is idle.
    markers_deferred: bool
    pending_markers: list[dict[str, Any]]
    # The journal's step keys in the order they were first written (None until read).
    journaled_order: list[str] | None
    # The replay's OpenTelemetry span (None without one), and the largest result a step may journal.
    span: Any
    result_limit: int

    if TYPE_CHECKING:
        # The replay's bookkeeping (replay.Replay).
        def next_key(self, name: str) -> str: ...
        def check_step_call(self, name: str) -> None: ...
        def lookup(self, key: str, kind: str) -> Entry | None: ...
        def count_step(self, key: str, journaled: bool) -> None: ...
        def after_write(self, status: str, key: str) -> None: ...
        def fail_fatally(self, exc: WorkflowError) -> NoReturn: ...
        def count_cost(self, attempt: Any) -> None: ...
        def cpu_time_exceeded(self, step: str) -> CpuTimeLimitExceeded | None: ...

        # A wait's take of an event from the inbox (waits.WaitSteps), which a child's wait makes too.
        def _consume(self, key: str, name: str, entry: Entry | None, types: list[str], deadline: datetime,
                     delta: timedelta) -> WorkflowStepEvent | None: ...

        # step.do's parts (step.JournaledSteps), whose pending step and attempt are step.PendingDo and
        # step.Attempt: declared there, above this module.
        def do(self, name: str, fn: Callable[..., Any], config: dict[str, Any] | None) -> Any: ...
        def begin_do(self, name: str, fn: Any, config: dict[str, Any] | None,
                     key: str | None = None) -> tuple[bool, Any]: ...
        def attempt(self, pending: Any, number: int, journal: Any = None, callers: Any = None) -> Any: ...
        def run_do(self, pending: Any, first: Any = None) -> Any: ...
