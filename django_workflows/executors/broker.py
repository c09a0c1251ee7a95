"""django-q2's ORM broker, made to sleep while its queue is empty instead of polling it.

django-q2's pusher asks its broker for tasks in a loop; the stock ORM broker
queries the queue table and, finding it empty, sleeps ``poll`` seconds: ten
queries a second for an idle worker at the recommended ``poll`` of 0.1. This
broker queries only when the queue may have changed (``django_workflows.shared.changes``:
a NOTIFY from the queue's trigger on PostgreSQL, the write-ahead log on SQLite),
or every ``IDLE_RECHECK_SECONDS`` in case a task's lock expired. New tasks are
picked up as soon as they commit; an idle worker makes no query for them.

    Q_CLUSTER = {"orm": "default", "broker_class": "django_workflows.executors.broker.ORMBroker", ...}
"""

from __future__ import annotations

import time
from datetime import timedelta

from django_workflows.errors import require_extra

require_extra("django_q", "q2", "The ORM broker (django_workflows.executors.broker.ORMBroker)")

from django.db import connections  # noqa: E402
from django.utils import timezone  # noqa: E402
from django_q.brokers.orm import ORM  # noqa: E402
from django_q.conf import Conf  # noqa: E402
from django_q.models import OrmQ  # noqa: E402

from django_workflows.shared import changes  # noqa: E402
from django_workflows.foundations.conf import workflow_settings

# The longest a dequeue blocks: django-q2's pusher checks for a stop between two dequeues.
_LONGEST_WAIT = 0.5


class ORMBroker(ORM):
    def __init__(self, list_key: str | None = None):
        super().__init__(list_key=list_key)
        # The lists it takes tasks from: its own, and those of the other queues its worker serves
        # (django_workflows.executors.queue_broker).
        self.list_keys: list[str] = [self.list_key]
        self._watcher: changes.ChangeWatcher | None = None
        self._look_at = 0.0  # monotonic time of the next look at the table, changed or not

    def dequeue(self):
        if self._watcher is None:
            self._watcher = changes.watcher(Conf.ORM, changes.QUEUE_CHANNEL, Conf.POLL)
        now = time.monotonic()
        if now >= self._look_at:
            prompted = self._look_at == 0.0
            self._look_at = now + workflow_settings.IDLE_RECHECK_SECONDS
            claimed = self._claim()
            if claimed:
                # More may be waiting behind a full batch: look again at once.
                self._look_at = 0.0
                return claimed
            if prompted:
                # Woken by a commit that was not the enqueue (a wake-up loop's claim comes first).
                self._watcher.follow_up()
        if self._watcher.wait(_LONGEST_WAIT):
            self._look_at = 0.0
        return None

    def _claim(self) -> list:
        """Lock up to ``bulk`` available tasks of its lists for this cluster, oldest first, in one statement; of
        several clusters sharing the queue, each task goes to one (SKIP LOCKED on PostgreSQL; SQLite
        has one writer at a time)."""
        queue = self.get_connection()
        connection = connections[queue.db]
        ops = connection.ops
        table, key, lock = (ops.quote_name(name) for name in (OrmQ._meta.db_table, "key", "lock"))
        skip_locked = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
        now = timezone.now()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {lock} = %s WHERE id IN (SELECT id FROM {table} WHERE {key} IN "
                f"({', '.join(['%s'] * len(self.list_keys))}) AND {lock} < %s ORDER BY id LIMIT %s{skip_locked}) "
                "RETURNING id, payload",
                [ops.adapt_datetimefield_value(now + timedelta(seconds=Conf.RETRY)), *self.list_keys,
                 ops.adapt_datetimefield_value(now), Conf.BULK],
            )
            return sorted(cursor.fetchall())
