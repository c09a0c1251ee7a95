"""Executors decide where and when a replay runs; the engine only asks them to enqueue one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.core.signals import setting_changed

if TYPE_CHECKING:
    from django_workflows.executors.base import BaseExecutor

logger = logging.getLogger("django_workflows.executors")

_lock = threading.Lock()
_executor: BaseExecutor | None = None
_overrides: list[BaseExecutor] = []


def get_executor() -> BaseExecutor:
    """The executor named by the ``EXECUTOR`` setting, built once and reused
    (or the one ``django_workflows.testing`` put in its place)."""
    global _executor
    if _overrides:
        return _overrides[-1]
    if _executor is None:
        with _lock:
            if _executor is None:
                from django_workflows.foundations.conf import workflow_settings

                cls = workflow_settings.import_string("EXECUTOR")
                _executor = cls(**workflow_settings.EXECUTOR_OPTIONS)
    return _executor


def enqueue(instance_pk: int) -> None:
    """Ask the executor for a replay of the instance, once the current transaction commits."""
    _hand_over(lambda executor: executor.enqueue_replay(instance_pk), lambda: f"a replay of instance {instance_pk}")


def enqueue_many(instance_pks: Iterable[int]) -> None:
    """``enqueue`` for several instances made runnable together: the executor may carry their replays in
    fewer tasks (``BaseExecutor.enqueue_replays``)."""
    pks = list(instance_pks)
    if pks:
        _hand_over(lambda executor: executor.enqueue_replays(pks), lambda: f"the replays of {len(pks)} instances")


def _hand_over(send: Callable[[BaseExecutor], None], what: Callable[[], str]) -> None:
    """Call ``send(executor)`` when the executor should be told: within the transaction when its task
    rows are written there, else once it commits. ``what()`` names what is sent, for the log, should the
    broker refuse it."""
    from django.db import router, transaction

    from django_workflows.models import Instance

    executor = get_executor()
    if executor.enqueues_in_transaction:
        send(executor)
    elif executor.runs_inline:
        # The replay itself runs here: what goes wrong in it is the caller's to see, not a broker's.
        transaction.on_commit(lambda: send(executor), using=router.db_for_write(Instance))
    else:
        transaction.on_commit(lambda: _push(executor, send, what), using=router.db_for_write(Instance))


def _push(executor: BaseExecutor, send: Callable[[BaseExecutor], None], what: Callable[[], str]) -> None:
    # After the commit: the instance is already queued in the database, and the sender's event or
    # change is stored. A broker that cannot take the task now (Redis restarting) must not turn that
    # into an error for the sender, whose retry would store the event twice: the sweeper queues every
    # instance left queued without a replay again (REDISPATCH_SECONDS).
    try:
        send(executor)
    except Exception as exc:
        logger.warning("could not enqueue %s (%s: %s); the sweeper will queue it again",
                       what(), type(exc).__name__, exc)


def reset() -> None:
    """Forget the built executor (settings changed)."""
    global _executor
    with _lock:
        _executor = None


def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    # The executor is built from DJANGO_WORKFLOWS; the django-q2 one checks its broker when built, and
    # the tasks one takes its backend from TASKS.
    if setting in ("DJANGO_WORKFLOWS", "Q_CLUSTER", "TASKS"):
        reset()


setting_changed.connect(_settings_changed)


def push_override(executor: BaseExecutor) -> None:
    """Use ``executor`` instead of the configured one until ``pop_override()``, whatever the settings say."""
    _overrides.append(executor)


def pop_override() -> None:
    _overrides.pop()
