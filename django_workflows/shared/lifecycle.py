"""What the engine tells of an instance's life: the signals of ``django_workflows.signals`` and log records.

The replay reports through one ``Reporter``; creating and steering an instance through ``announce``.
Each report costs nothing beyond a look at the signal's receivers and the logger's level when no one
listens: its arguments are put together only for a receiver, its message only for an enabled level.

Log records go to ``django_workflows.engine.replay`` (an instance's replays: started, waiting, paused,
complete, errored, terminated, abandoned), ``django_workflows.engine.step`` (steps: succeeded, retrying,
failed, timers) and ``django_workflows.client.instances`` (created, paused, resumed, restarted, terminated by a
caller). Each carries ``workflow``, ``instance_id``, ``instance_pk``, ``step`` (a step's key, or None)
and ``attempt`` (or None) as attributes of the record (``extra``), for a structured formatter. A step's
result is shown only at DEBUG, shortened, and never for a step whose config says
``"sensitive": "output"`` (``REDACTED`` instead); event payloads, params and outputs are never logged.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction

from django_workflows import signals
from django_workflows.models import Instance

replay_log = logging.getLogger("django_workflows.engine.replay")
step_log = logging.getLogger("django_workflows.engine.step")
instances_log = logging.getLogger("django_workflows.instances")

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

# The longest a step's result is shown in a DEBUG record.
SHOWN_RESULT = 200


# What counts finished steps for the metrics (``telemetry.install`` sets it): called with the workflow's
# name, the step's kind and "succeeded" or "failed" once the step's row committed. Not a receiver of
# ``step_succeeded``: a step is the engine's most frequent report, and the signal's dispatch (its
# keyword arguments, the live receivers' lookup, send_robust's bookkeeping) cost several times the
# count itself, some 5 % of a step on SQLite.
step_counter: Callable[[str, str, str], None] | None = None


def shown_result(value, sensitive: bool) -> str:
    """A step's result as a log record shows it: ``REDACTED`` if sensitive, else its repr, shortened."""
    if sensitive:
        return signals.REDACTED
    text = repr(value)
    return text if len(text) <= SHOWN_RESULT else text[: SHOWN_RESULT - 3] + "..."


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _extra(workflow: str, instance_id: str, pk: int, step: str | None = None,
           attempt: int | None = None) -> dict:
    return {"workflow": workflow, "instance_id": instance_id, "instance_pk": pk, "step": step,
            "attempt": attempt}


class Reporter:
    """One replay's reports. ``alias`` is set when the replay runs inside a transaction (a test's, or
    an inline replay in an atomic request): its signals then wait for that transaction's commit."""

    __slots__ = ("pk", "instance_id", "workflow", "alias", "name")

    def __init__(self, pk: int, instance_id: str, workflow: str):
        self.pk, self.instance_id, self.workflow = pk, instance_id, workflow
        self.alias: str | None = None
        self.name = f"{workflow}/{instance_id}"

    # Sending and logging.

    def _once_committed(self, report: Callable[..., object], *args, **kwargs) -> None:
        """Call ``report`` now, or once the transaction the replay runs inside commits."""
        if self.alias is None:
            report(*args, **kwargs)
        else:
            transaction.on_commit(functools.partial(report, *args, **kwargs), using=self.alias)

    def _send(self, signal, **kwargs) -> None:
        kwargs["instance_pk"], kwargs["instance_id"] = self.pk, self.instance_id
        kwargs["workflow_name"] = self.workflow
        self._once_committed(signal.send_robust, Instance, **kwargs)

    def _log(self, logger, level, step, attempt, message, *args, exc_info=None) -> None:
        logger.log(level, "%s: " + message, self.name, *args, exc_info=exc_info,
                   extra=_extra(self.workflow, self.instance_id, self.pk, step, attempt))

    # The replay.

    def started(self, epoch: int, resumed: bool) -> None:
        if signals.instance_started.receivers:
            self._send(signals.instance_started, epoch=epoch, resumed=resumed)
        if replay_log.isEnabledFor(DEBUG):
            self._log(replay_log, DEBUG, None, None, "running run() (epoch %s, %s)", epoch,
                      "resuming from its journal" if resumed else "from the top")

    def lease_lapsed(self, epoch: int, lapsed_at: float) -> None:
        """The replay's lease lapsed unrenewed at ``lapsed_at`` (``time.time()``): told once, by the lease
        keeper's next round or by the replay as it ends, whichever comes first."""
        replay_log.warning(
            "%s: the lease (epoch %s) lapsed unrenewed %.1f s ago (the database unreachable, or this process "
            "too busy to renew it): until a renewal lands, this replay starts no step body and writes nothing, "
            "and once the lease expires another worker may take the instance over; check that LEASE_SECONDS "
            "is well above a stall you expect", self.name, epoch, time.time() - lapsed_at,
            extra={**_extra(self.workflow, self.instance_id, self.pk), "epoch": epoch, "lapsed_at": lapsed_at})

    def waiting(self, step_key: str, reason: str, wake_at: datetime | None, waiting_for) -> None:
        if signals.instance_waiting.receivers:
            self._send(signals.instance_waiting, step_key=step_key, reason=reason, wake_at=wake_at,
                       waiting_for=waiting_for)
        if replay_log.isEnabledFor(DEBUG):
            until = wake_at.isoformat() if wake_at is not None else "no deadline"
            what = f"an event of type {', '.join(waiting_for)}" if waiting_for else reason
            self._log(replay_log, DEBUG, step_key or None, None, "waiting at step %r for %s, until %s",
                      step_key, what, until)

    def unregistered(self, wake_at: datetime) -> None:
        """The workflow is not registered in this process: the instance waits for a worker that knows it."""
        if signals.instance_waiting.receivers:
            self._send(signals.instance_waiting, step_key="", reason="unregistered", wake_at=wake_at,
                       waiting_for=None)
        if replay_log.isEnabledFor(WARNING):
            self._log(replay_log, WARNING, None, None, "workflow %r is not registered in this process; "
                      "waiting until %s for a worker that knows it", self.workflow, wake_at.isoformat())

    def paused(self, step_key: str) -> None:
        if signals.instance_paused.receivers:
            self._send(signals.instance_paused, step_key=step_key)
        if replay_log.isEnabledFor(INFO):
            self._log(replay_log, INFO, step_key or None, None, "paused%s",
                      f" at step {step_key!r}" if step_key else "")

    def completed(self, output) -> None:
        if signals.instance_completed.receivers:
            self._send(signals.instance_completed, output=output)
        if replay_log.isEnabledFor(INFO):
            self._log(replay_log, INFO, None, None, "complete")

    def errored(self, error: BaseException, rollback: dict | None) -> None:
        if signals.instance_errored.receivers:
            self._send(signals.instance_errored, error=error, rollback=rollback)
        if replay_log.isEnabledFor(ERROR):
            undone = (f" (rollback: {rollback.get('status')}, {rollback.get('undone')} undone)"
                      if rollback else "")
            step = getattr(error, "step", None)  # the step a WorkflowError names, if it names one
            self._log(replay_log, ERROR, step if isinstance(step, str) else None, None, "errored: %s%s",
                      _error(error), undone, exc_info=error if error.__traceback__ is not None else None)

    def terminated(self, rollback: dict | None) -> None:
        if signals.instance_terminated.receivers:
            self._send(signals.instance_terminated, rollback=rollback)
        if replay_log.isEnabledFor(INFO):
            self._log(replay_log, INFO, None, None, "terminated after its rollback (%s, %s undone)",
                      (rollback or {}).get("status"), (rollback or {}).get("undone"))

    def abandoned(self, error: BaseException) -> None:
        """A statement of the engine's own failed: the replay is given up and tried again shortly."""
        if replay_log.isEnabledFor(WARNING):
            self._log(replay_log, WARNING, None, None, "replay abandoned, the instance is replayed again "
                      "shortly: a statement of the engine failed (%s)", error, exc_info=error)

    def fenced(self) -> None:
        if replay_log.isEnabledFor(INFO):
            self._log(replay_log, INFO, None, None, "replay stopped: the instance was terminated, restarted "
                      "or taken over by another worker while it ran")

    # Steps.

    def step_succeeded(self, key: str, name: str, kind: str, attempt: int | None = None, result=None,
                       sensitive: bool = False) -> None:
        if step_counter is not None:
            self._once_committed(step_counter, self.workflow, str(kind), "succeeded")
        if signals.step_succeeded.receivers:
            self._send(signals.step_succeeded, step_key=key, step_name=name, kind=kind, attempt=attempt,
                       result=signals.REDACTED if sensitive else result)
        if step_log.isEnabledFor(DEBUG):
            if kind == "do":
                self._log(step_log, DEBUG, key, attempt, "step %r succeeded (attempt %s): %s", key, attempt,
                          shown_result(result, sensitive))
            elif kind == "waitForEvent":
                self._log(step_log, DEBUG, key, None, "wait %r took an event of type %r", key,
                          getattr(result, "type", None))
            else:
                self._log(step_log, DEBUG, key, None, "sleep %r ended", key)

    def step_retrying(self, key: str, name: str, attempt: int, error: BaseException,
                      wake_at: datetime | None) -> None:
        if signals.step_retrying.receivers:
            self._send(signals.step_retrying, step_key=key, step_name=name, kind="do", attempt=attempt,
                       error=error, wake_at=wake_at)
        if step_log.isEnabledFor(WARNING):
            self._log(step_log, WARNING, key, attempt, "step %r attempt %s failed (%s); retrying %s", key,
                      attempt, _error(error), "at once" if wake_at is None else f"at {wake_at.isoformat()}")

    def step_failed(self, key: str, name: str, kind: str, attempt: int | None, error: BaseException) -> None:
        if step_counter is not None:
            self._once_committed(step_counter, self.workflow, str(kind), "failed")
        if signals.step_failed.receivers:
            self._send(signals.step_failed, step_key=key, step_name=name, kind=kind, attempt=attempt,
                       error=error)
        if step_log.isEnabledFor(WARNING):
            if kind == "do":
                self._log(step_log, WARNING, key, attempt, "step %r failed for good at attempt %s: %s", key,
                          attempt, _error(error))
            else:
                self._log(step_log, WARNING, key, None, "wait %r failed: %s", key, _error(error))

    def written_outside_atomic_step(self, key: str, attempt: int, alias: str, writers: str) -> None:
        """Other threads wrote to an atomic step's database while its body ran (``atomic_steps``)."""
        if step_log.isEnabledFor(WARNING):
            self._log(step_log, WARNING, key, attempt,
                      "step %r is atomic=True, and while attempt %s of its body ran, another thread wrote to "
                      "database %r on a connection of its own: %s. Such writes are not part of the step's "
                      "transaction: they commit on their own, even when the attempt fails or its journal row "
                      "is refused, and every retry makes them again (at least once, not exactly once). Make "
                      "the step's writes in the thread that runs its body, or drop atomic=True and make them "
                      "idempotent.", key, attempt, alias, writers)

    def timer_fired(self, key: str, name: str, kind: str, wake_at: datetime,
                    started: datetime | None) -> None:
        """A step whose wake time had come: ``started`` is when the replay took the lease."""
        if started is None:
            return
        late_by = max(started - wake_at, timedelta(0))
        if signals.timer_fired.receivers:
            self._send(signals.timer_fired, step_key=key, step_name=name, kind=kind, wake_at=wake_at,
                       late_by=late_by)
        if step_log.isEnabledFor(DEBUG):
            self._log(step_log, DEBUG, key, None, "%s timer of step %r fired %.3f s after its time", kind,
                      key, late_by.total_seconds())


def announce(signal, pk: int, instance_id: str, workflow: str, level: int, message: str, *args,
             using: str | None = None, **kwargs) -> None:
    """Send ``signal`` (unless None) and log ``message`` for a change a caller made (create, pause,
    resume, restart, terminate), once the caller's transaction (if one is open on ``using``) has
    committed."""
    if not (signal is not None and signal.receivers) and not instances_log.isEnabledFor(level):
        return

    def now_committed():
        if signal is not None and signal.receivers:
            signal.send_robust(Instance, instance_pk=pk, instance_id=instance_id, workflow_name=workflow,
                               **kwargs)
        if instances_log.isEnabledFor(level):
            instances_log.log(level, "%s/%s: " + message, workflow, instance_id, *args,
                              extra=_extra(workflow, instance_id, pk))

    # Called at once outside a transaction.
    transaction.on_commit(now_committed, using=using)
