"""Replays in the calling thread: for scripts and one-off commands, not for a site.

It watches no timer, so a sleeping instance waits until something calls ``run_due()``; a site runs a
worker (``workflows_worker``) instead, and tests use ``django_workflows.testing``.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from django_workflows.executors.base import REPLAY_TASK, BaseExecutor, run_task


class InlineExecutor(BaseExecutor):
    """Runs each enqueued replay right away, in the thread that committed the change.

    A replay that makes another instance runnable (a step creating an
    instance, say) does not recurse: the new replay is queued and run once the
    current one has finished. Timers are not watched: call ``run_due()`` (or
    use ``django_workflows.testing``) to run instances whose wake time has come.
    """

    runs_inline = True

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._local = threading.local()

    def _queue(self) -> deque[int]:
        queue = getattr(self._local, "queue", None)
        if queue is None:
            queue = self._local.queue = deque()
        return queue

    def enqueue_replay(self, instance_pk: int) -> None:
        queue = self._queue()
        queue.append(instance_pk)
        if getattr(self._local, "draining", False):
            return
        self._local.draining = True
        try:
            self.drain()
        finally:
            self._local.draining = False

    def replays_at_once(self) -> bool:
        # Within a replay of this thread, a replay enqueued waits for it to end (a step creating an
        # instance): its lease would wait with it, unrenewed.
        return not getattr(self._local, "draining", False)

    def drain(self) -> int:
        """Run every queued replay; return how many ran."""
        queue, ran = self._queue(), 0
        while queue:
            run_task(REPLAY_TASK, queue.popleft())
            ran += 1
        return ran

    def run_due(self) -> int:
        """Run every instance whose wake time has passed; return how many replays ran."""
        from django_workflows.shared import clock
        from django_workflows.models import Instance

        ran = 0
        for pk in Instance.objects.due(clock.now()).order_by("wake_at").values_list("pk", flat=True):
            run_task(REPLAY_TASK, pk)
            ran += 1
        return ran + self.drain()
