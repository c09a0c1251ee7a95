"""Test your workflows in milliseconds: a recording executor, whose replays run in the test when it
says so, and a clock that moves only when told.

    from django_workflows.testing import run_workflows

    def test_approval_expires(db):
        with run_workflows() as env:
            instance = workflows.get("payment-approval").create(params={"amount": 120})
            env.run_until_idle()
            env.advance("72 hours")
            assert instance.status()["output"] == {"status": "expired"}

``workflows_env`` is the same as a pytest fixture (installed with the package).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from django_workflows import executors
from django_workflows.shared import clock
from django_workflows.shared.durations import parse_duration
from django_workflows.executors.base import BaseExecutor


class RecordingExecutor(BaseExecutor):
    """Records the replays asked for; ``WorkflowTestEnv`` runs them when told.

    It enqueues inside the caller's transaction, so replays are seen even in a
    test wrapped in a transaction that never commits.
    """

    enqueues_in_transaction = True

    def __init__(self, **options):
        super().__init__(**options)
        self.queue: deque[int] = deque()
        self.enqueued: list[int] = []

    def enqueue_replay(self, instance_pk: int) -> None:
        self.queue.append(instance_pk)
        self.enqueued.append(instance_pk)

    def reset(self) -> None:
        self.queue.clear()
        self.enqueued.clear()


class ManualClock:
    """A clock that stands still until ``advance()`` moves it."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> None:
        self._now += delta

    def set(self, moment: datetime) -> None:
        if moment < self._now:
            raise ValueError(f"the clock cannot go back from {self._now} to {moment}")
        self._now = moment


class WorkflowTestEnv:
    def __init__(self, executor: RecordingExecutor, test_clock: ManualClock):
        self.executor = executor
        self.clock = test_clock

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def run_until_idle(self, max_replays: int = 100_000) -> int:
        """Run queued replays and every instance whose wake time has come, until none is left.

        Timers fire through the worker's own wake-up code (``store.dispatch.wake_due``) at the test
        clock's time, so a test sees what a worker would do, not a copy of it. Returns the number of
        replays run.
        """
        from django_workflows.engine.replay import replay
        from django_workflows.store.dispatch import wake_due

        ran = 0
        while True:
            if not self.executor.queue and not wake_due(self.now):
                return ran
            replay(self.executor.queue.popleft())
            ran += 1
            if ran >= max_replays:
                raise RuntimeError(
                    f"run_until_idle() ran {ran} replays without the instances going idle; "
                    "is a workflow looping without waiting?"
                )

    def advance(self, duration) -> int:
        """Move the clock forward by ``duration`` ("72 hours", milliseconds, a timedelta),
        running every timer that falls due on the way, in order and at its own time.

        A retry scheduled by a timer on the way fires too if it is due before the end,
        as it would in real time. Returns the number of replays run.
        """
        from django_workflows.store.dispatch import next_wake_time

        target = self.now + parse_duration(duration, what="advance()")
        ran = self.run_until_idle()
        while (next_wake := next_wake_time()) is not None and next_wake <= target:
            self.clock.set(max(self.now, next_wake))
            ran += self.run_until_idle()
        self.clock.set(target)
        return ran + self.run_until_idle()


@contextmanager
def run_workflows(start: datetime | None = None) -> Iterator[WorkflowTestEnv]:
    """Replace the executor with a recording one and the clock with a manual one, for the block.

    The replacement holds whatever the test does to settings (``override_settings`` of
    ``DJANGO_WORKFLOWS`` inside the block keeps the recording executor).
    """
    executor = RecordingExecutor()
    test_clock = ManualClock(start)
    executors.push_override(executor)
    previous = clock.use(test_clock)
    try:
        yield WorkflowTestEnv(executor, test_clock)
    finally:
        clock.use(previous)
        executors.pop_override()


def verify_journal(instance):
    """Replay an instance's journal against the registered code, running no step and writing nothing;
    return the ``Divergence`` (why the code deployed now cannot go on with it), or None if it agrees.
    ``instance`` is an ``InstanceHandle`` (``workflows.get(name).get(id)``) or an ``Instance``."""
    from django_workflows.models import Instance
    from django_workflows.engine.verification import verify

    return verify(instance if isinstance(instance, Instance) else Instance.objects.get(pk=instance.pk))
