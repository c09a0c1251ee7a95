"""Steps side by side: ``step.all([...])``, Cloudflare's ``Promise.all`` of ``step.do`` calls.

    receipt, label, invoice = step.all([
        ("charge", charge),
        ("print label", print_label, {"retries": {"limit": 10}}),
        ("send invoice", send_invoice),
    ])

The keys are taken in the list's order when ``step.all`` is called, so they are the same on every replay
whichever body finishes first. Steps the journal answers are not run again; the others' first attempts
run at once, each in a thread of its own under its own timeout; then each is journaled in the list's
order, with the rest of its attempts (a retry without delay runs again here, one with a delay suspends).
So the journal's order is the list's, never the order of finishing. The results come back in the list's
order. If a step fails for good, the first in the list to fail is raised, after every other step of the
list was journaled; if none failed and some wait out a retry's delay, the instance sleeps until the
earliest.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, cast

from django.db import connections

from django_workflows.foundations.control_flow import Suspend
from django_workflows.shared.error_journal import USER_FAILURES
from django_workflows.errors import InvalidStepInput
from django_workflows.engine.do_steps import DoSteps
from django_workflows.engine.step_host import Attempt, PendingDo, StepHost
from django_workflows.foundations.validation import validate_step_name


def parse_calls(calls: Any) -> list[tuple[str, Any, dict[str, Any] | None]]:
    """``[(name, fn) or (name, fn, config), ...]`` as ``(name, fn, config)`` triples, or a clear error."""
    if not isinstance(calls, (list, tuple)) or not calls:
        raise InvalidStepInput(f"step.all takes a non-empty list of (name, fn) or (name, fn, config), got {calls!r}")
    parsed = []
    for call in calls:
        if not isinstance(call, (list, tuple)) or len(call) not in (2, 3):
            raise InvalidStepInput(f"step.all: each item is (name, fn) or (name, fn, config), got {call!r}")
        name, fn, config = (*call, None) if len(call) == 2 else call
        validate_step_name(name)
        parsed.append((name, fn, config))
    return parsed


class ConcurrentSteps:
    """The replay's side of ``step.all``, given the host and the ``step.do`` it runs each step with
    (``DoSteps``: its ``begin_do``, ``attempt`` and ``run_do``), as ``step.do`` does."""

    __slots__ = ("host", "steps")

    def __init__(self, host: StepHost, steps: DoSteps):
        self.host, self.steps = host, steps

    def all_steps(self, calls: Any) -> list[Any]:
        parsed = parse_calls(calls)
        steps, host = self.steps, self.host
        results: list[Any] = [None] * len(parsed)
        pending: list[tuple[int, PendingDo]] = []
        failures: list[tuple[int, BaseException]] = []
        suspensions: list[Suspend] = []
        for index, (name, fn, config) in enumerate(parsed):
            try:
                answered, outcome = steps.begin_do(name, fn, config)
            except Suspend as suspension:
                suspensions.append(suspension)
                continue
            except USER_FAILURES as failure:
                if host.fatal is not None:
                    raise
                failures.append((index, failure))
                continue
            if answered:
                results[index] = outcome
            else:
                pending.append((index, outcome))
        firsts = self.first_attempts_of([step for _, step in pending])
        for (index, step), first in zip(pending, firsts):
            try:
                results[index] = steps.run_do(step, first)
            except Suspend as suspension:
                suspensions.append(suspension)
            except USER_FAILURES as failure:
                if host.fatal is not None:
                    raise
                failures.append((index, failure))
        if failures:
            raise min(failures, key=lambda item: item[0])[1]
        if suspensions:
            paused = [suspension for suspension in suspensions if suspension.pause]
            # Each a step.do's retry, which has its wake time.
            raise paused[0] if paused else min(suspensions, key=lambda suspension: cast(datetime, suspension.wake_at))
        return results

    def first_attempts_of(self, steps: list[PendingDo]) -> list[Attempt | None]:
        """The first attempts of pending ``steps``, run side by side, in their order; None for a step
        whose attempts run when its turn to be journaled comes: an atomic one (its transaction is the
        replay thread's connection), or the only one."""
        side = [step for step in steps if not step.policy.atomic]
        if len(side) < 2:
            return [None] * len(steps)
        ran = iter(self._first_attempts(side))
        return [None if step.policy.atomic else next(ran) for step in steps]

    def _first_attempts(self, steps: list[PendingDo]) -> list[Attempt]:
        """Run each step's next attempt at once, each in a thread of its own; their outcomes in order."""
        host = self.host
        host.writer.check_lease()
        # A step called from inside one of these bodies errors the instance, as from any step's body.
        host.running_step = steps[0].key
        try:
            with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="django-workflows-step") as pool:
                futures = [pool.submit(self._attempt_in_thread, step) for step in steps]
                outcomes = [future.result() for future in futures]
        finally:
            host.running_step = None
        # Counted here, in the replay's thread, once all have ended: their CPU time was used in other
        # threads, and counts toward the replay's all the same.
        for outcome in outcomes:
            host.count_cost(outcome)
        return outcomes

    def _attempt_in_thread(self, step: PendingDo) -> Attempt:
        try:
            return self.steps.attempt(step, len(step.entry.attempts) + 1 if step.entry is not None else 1)
        finally:
            # The body's own connections, opened in this thread, end with it.
            connections.close_all()
