"""What a replay costs: its CPU time, in every thread it ran a step body in, and the wall time of its
step attempts; and the CPU time limit a replay stops at.

Waiting (on I/O, in sleeps, on locks) is in neither figure: ``time.thread_time()`` counts a thread's own
CPU only. A body run in another thread (``step.all``) is measured there and counted here once it ended.
No database: the figures are written by the statement that gives the lease back (``Costs``).
"""

from __future__ import annotations

import threading
import time

from django_workflows.errors import CpuTimeLimitExceeded
from django_workflows.engine.step_host import Attempt
from django_workflows.store.journal import Costs


class ReplayCosts:
    """The replay's CPU and step wall time so far, measured from its creation in the replay's thread."""

    __slots__ = ("thread", "cpu_started", "wall_started", "cpu_elsewhere", "step_wall", "cpu_time_limit")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.cpu_started = time.thread_time()
        self.wall_started = time.perf_counter()
        # CPU time of the step bodies that ran in other threads (step.all).
        self.cpu_elsewhere = 0.0
        # Seconds the step attempts of this replay took, end to end.
        self.step_wall = 0.0
        # The workflow's limit in seconds (None: none), known once the workflow is.
        self.cpu_time_limit: float | None = None

    def cpu_used(self) -> float:
        """Seconds of CPU time this replay has used so far, in every thread it ran a step body in."""
        return time.thread_time() - self.cpu_started + self.cpu_elsewhere

    def costs(self) -> Costs:
        """What the replay adds to the instance's totals as it ends."""
        return Costs(cpu_ms=self.cpu_used() * 1000, step_wall_ms=self.step_wall * 1000)

    def count(self, attempt: Attempt) -> None:
        """Count a step attempt's cost; called in the replay's thread, whichever thread ran the body. A
        body that ran in the replay's thread is in its CPU time already."""
        self.step_wall += attempt.wall
        if attempt.thread != self.thread:
            self.cpu_elsewhere += attempt.cpu

    def exceeded(self, instance: str, step: str) -> CpuTimeLimitExceeded | None:
        """The error that stops the replay of ``instance`` before ``step`` if it used more CPU time than
        its limit."""
        limit = self.cpu_time_limit
        if limit is None:
            return None
        # A thread cannot use more CPU than the wall time it has been alive for: while the replay's
        # wall time is under the limit, so is its CPU time, and ``thread_time()`` (a system call, not
        # read from the vDSO as ``perf_counter()`` is: some 5 % of a step on SQLite) is not asked.
        if time.perf_counter() - self.wall_started + self.cpu_elsewhere <= limit:
            return None
        used = self.cpu_used()
        if used <= limit:
            return None
        return CpuTimeLimitExceeded(
            f"Instance {instance} used {_seconds_over(used, limit)} s of CPU in one replay, over its "
            f"cpu_time_limit of {limit:g} s; it was stopped at step {step!r}. Waiting on I/O, sleeps and "
            "waits for events do not count. Raise cpu_time_limit on the workflow class (at most 5 "
            "minutes), or spread the work over replays (each step.sleep or wait for an event starts a "
            "new one).",
            step=step, limit_ms=round(limit * 1000, 3), used_ms=round(used * 1000, 3),
        )


def _seconds_over(used: float, limit: float) -> str:
    """``used`` seconds to a tenth, or to as many decimals as it takes to read as more than ``limit``
    (0.25 s over a limit of 0.2 s, not "0.2 s")."""
    for digits in (1, 2):
        if round(used, digits) > limit:
            return f"{used:.{digits}f}"
    return f"{used:.3f}"
