"""How a replay ends, decided from how ``run()`` ended and what the replay noted meanwhile.

``run()`` returns or raises, and the steps it called may have noted four things it cannot undo by
catching: a fatal error (``NonDeterminismError``, a limit: the instance errors), a suspension (a step
must wait: a bare ``except:`` may have swallowed it, yet the instance waits), a stop
(``terminate(rollback=True)``, or the instance's deadline passed), and a continuation
(``step.continue_as_new``). The rules, in the order they apply:

- a fatal error ends the instance errored, whatever run() did;
- a suspension run() swallowed wins over what it did after (returned, or failed in a hand-written retry
  loop giving up): the step it swallowed has not failed, it waits;
- a stop asked for ends it terminated, or errored past its deadline (after the undos of what ran);
- a continuation, even one run() swallowed, ends it and starts its successor;
- a failure of run() with undos remembered rolls back, then errors; without, errors;
- otherwise run() completed with what it returned.

No database and no clock: ``decide`` is a function of its inputs (``tests/unit/test_replay_outcome.py``).
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass
from typing import Any

from django_workflows.foundations.control_flow import ContinueAsNew, Suspend, Terminating


class Ending(enum.Enum):
    COMPLETE = "complete"
    """run() returned: the instance completes with its output."""
    SUSPEND = "suspend"
    """A step must wait (or a pause was asked): the instance waits, or is paused."""
    ERROR = "error"
    """The instance errors with the error."""
    ROLL_BACK = "roll back"
    """run() failed after steps with undos succeeded: the undos run, then the instance errors."""
    TERMINATE = "terminate"
    """Terminated with rollback, or past its deadline: the undos of the steps run() reached run, then it
    ends terminated (or errored with ``WorkflowTimeoutError``)."""
    CONTINUE = "continue as new"
    """``step.continue_as_new``: the instance ends and its successor starts."""


@dataclass(frozen=True)
class Outcome:
    """What the replay does as it ends: ``ending``, with the output (COMPLETE), the suspension
    (SUSPEND), the error (ERROR, ROLL_BACK) or the ``ContinueAsNew`` (CONTINUE) as ``value``, and the
    failure's traceback."""

    ending: Ending
    value: Any = None
    traceback: str = ""


def decide(raised: BaseException | None, output: Any, *, fatal: BaseException | None,
           suspended: Suspend | None, terminating: bool, undos_remembered: bool,
           continued: ContinueAsNew | None = None) -> Outcome:
    """The outcome of a replay whose ``run()`` raised ``raised`` (a ``Terminating``, a ``Suspend``, a
    ``ContinueAsNew`` or a failure of its own), or returned ``output`` (``raised`` None); ``continued``,
    the continuation a step call raised, if any (run() may have swallowed it)."""
    if isinstance(raised, Terminating):
        return Outcome(Ending.TERMINATE)
    if isinstance(raised, Suspend):
        return Outcome(Ending.ERROR, fatal) if fatal is not None else Outcome(Ending.SUSPEND, raised)
    if fatal is None and not terminating and continued is not None:
        return Outcome(Ending.CONTINUE, continued)
    if raised is not None:
        if fatal is None and suspended is not None:
            return Outcome(Ending.SUSPEND, suspended)
        # SystemExit and KeyboardInterrupt raised by the workflow's own code fail the instance instead
        # of the worker: django-q2's workers ignore SIGINT, so they cannot be an operator's.
        failure_traceback = "".join(traceback.format_exception(raised))
        if fatal is None and terminating:
            return Outcome(Ending.TERMINATE)
        if fatal is None and undos_remembered:
            return Outcome(Ending.ROLL_BACK, raised, failure_traceback)
        return Outcome(Ending.ERROR, fatal or raised, failure_traceback)
    if fatal is not None:
        return Outcome(Ending.ERROR, fatal)
    if terminating:
        # run() swallowed the stop, or every step it called was journaled: terminate all the same.
        return Outcome(Ending.TERMINATE)
    if suspended is not None:
        # run() swallowed a suspension and returned: the instance is not done, it waits.
        return Outcome(Ending.SUSPEND, suspended)
    return Outcome(Ending.COMPLETE, output)
