"""django-q2's Redis broker for a worker serving several queues (``django_workflows.executors.queue_broker``): one
BLPOP over every queue's list. A module of its own, imported only by such a worker, since it needs the
redis package ([redis])."""

from __future__ import annotations

from typing import Any

from django_q.brokers.redis_broker import Redis


class RedisQueues(Redis):
    """django-q2's Redis broker, taking the next task of any of several lists."""

    def __init__(self, list_keys: list[str]):
        super().__init__(list_key=list_keys[0])
        self.list_keys = [Redis(list_key=key).list_key for key in list_keys]

    def dequeue(self) -> Any:
        task = self.connection.blpop(self.list_keys, 1)
        if task:
            return [(None, task[1])]
        return None
