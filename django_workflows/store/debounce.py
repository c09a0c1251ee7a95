"""Debounced creation: the triggers of one workflow and debounce key join one scheduled instance.

The first trigger inserts a ``scheduled`` instance that wakes ``period`` after it; each later trigger
within the period locks that instance's row, gives it its params and moves its wake time to ``period``
after itself (never past ``max_wait`` after the first). When the wake time comes, the wake-up loop queues
it and the next trigger starts a new one.

Two triggers racing cannot make two instances: the partial unique index ``dw_instance_debounce`` (one
scheduled instance per workflow and key) refuses the second insert. On PostgreSQL that insert waits for
the first trigger's commit, fails, and its trigger looks again, finds the instance and joins it; SQLite
has one writer at a time, so the second trigger finds the first's instance at its first look.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, router, transaction

from django_workflows.shared import clock
from django_workflows.executors import enqueue
from django_workflows.models import Instance, InstanceStatus
from django_workflows.store import tags as instance_tags

# A trigger looks again after losing a race to insert; losing more than once in a row would mean the
# instance it lost to started (and a new one was inserted) between two looks, each time.
_LOOKS = 5


def trigger(instance: Instance, tags: Mapping[str, str], period: timedelta, max_wait: timedelta | None,
            merge: Callable[[Any], Any] | None, now: datetime) -> tuple[int, str, bool]:
    """Join the instance that ``instance``'s workflow and ``debounce_key`` have scheduled, or insert
    ``instance`` (``scheduled``, its wake time set) with its ``tags`` if none is. Return the pk and the id
    of the one instance, and whether this trigger joined it.

    Joining gives it ``instance.params`` (or ``merge(its stored params)``) and a wake time ``period`` from
    ``now``, capped at ``max_wait`` after it was created. An instance whose wake time has passed and that
    the wake-up loop has not queued yet (no worker runs, or it is behind) is queued here, as the loop would,
    and a new one inserted: this trigger came after its period.

    Whether the start has come is decided by the clock read once the trigger holds the row, not by
    ``now``, when the trigger was asked for: a trigger that waited for the row (another trigger's
    transaction, SQLite's write lock) past the start would otherwise join an instance due to start, and
    put its start off, or not, by whether the wake-up loop had taken the row meanwhile."""
    alias = router.db_for_write(Instance)
    for look in range(_LOOKS):
        try:
            with transaction.atomic(using=alias):
                scheduled = Instance.objects.debounced(instance.workflow_name, instance.debounce_key or "")
                row = scheduled.select_for_update().values("pk", "instance_id", "params", "created_at",
                                                           "wake_at").first()
                now = max(now, clock.now())
                if row is not None and row["wake_at"] is not None and row["wake_at"] > now:
                    wake_at = now + period
                    if max_wait is not None:
                        wake_at = min(wake_at, row["created_at"] + max_wait)
                    params = instance.params if merge is None else merge(row["params"])
                    scheduled.filter(pk=row["pk"]).update(params=params, wake_at=wake_at, updated_at=now)
                    return row["pk"], row["instance_id"], True
                if row is not None:
                    # Its start passed is no wake time: a queued instance keeps one only while held back.
                    scheduled.filter(pk=row["pk"]).update(status=InstanceStatus.QUEUED, wake_at=None,
                                                          updated_at=now)
                    enqueue(row["pk"])
                instance.save(force_insert=True)
                if tags:
                    instance_tags.write(instance.pk, tags)
                return instance.pk, instance.instance_id, False
        except IntegrityError:
            if look == _LOOKS - 1:
                raise
            instance.pk = None  # the insert was rolled back; the next look inserts it afresh
    raise AssertionError("unreachable")  # the loop returns or raises
