"""Cron schedules in the database: one ``Schedule`` row per declared expression, and the transaction that
turns its due slots into instances.

A round for a due schedule is one transaction: lock its row (``SELECT … FOR UPDATE``; on SQLite the
transaction's ``BEGIN IMMEDIATE`` takes the database's write lock), read its next slot, insert the
instances of the slots the catch-up policy keeps (each with its replay's task, as any create), and move
the next slot on. Two workers that find the same slot due run the round one after the other: the second
reads the moved slot and creates nothing. A worker killed in the middle of a round leaves nothing
behind, and the slot is still due for the others. The instance ids (``cron-<key>-<slot>``) are the last
line: should a round meet an id that exists (an instance created by hand with it, a schedule row
deleted and made again), it is done again skipping the ids that exist, and never creates a second one.

``Scheduler`` is what a worker keeps between rounds: each schedule's next slot as last read, so an
idle worker makes no statement until that time comes; then one statement per due slot, plus the
inserts and the update for the worker that creates it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, router, transaction

from django_workflows.shared import deadlines, options
from django_workflows.shared.definition import registry
from django_workflows.errors import InvalidParams
from django_workflows.executors import enqueue
from django_workflows.models import Instance, InstanceStatus, Schedule
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.cron import (
    ON_TIME,
    ScheduleSpec,
    plan,
    slot_instance_id,
    slot_params,
)

logger = logging.getLogger("django_workflows.schedules")  # its name in LOGGING settings since 0.1

RETRY_SECONDS = 1.0
"""How long a worker waits before it runs a round that failed again."""


def _placement(workflow_name: str, params: Any, now: datetime) -> dict[str, Any]:
    """A scheduled instance's queue, priority, turn and limit key, and its timeout and deadline, as its
    class declares them. A keyed limit whose key the slot's params do not hold counts it with the
    instances of no key (""), rather than stopping the schedule: a schedule's params are the slot's,
    which no key path can be given."""
    workflow_class = registry.get(workflow_name)
    timeout = WorkflowOptions.of(workflow_class).timeout
    deadline = {"timeout": timeout, "deadline": deadlines.deadline_after(now, timeout)}
    try:
        return {**options.place(workflow_class, params, None, now).fields(), **deadline}
    except InvalidParams:
        return {**options.place(workflow_class, params, None, now, with_key=False).fields(), **deadline}


def _alias() -> str:
    return router.db_for_write(Schedule)


def declared_specs() -> tuple[list[ScheduleSpec], list[str]]:
    """The schedules of every registered workflow class this process can use, and a sentence for each
    class whose schedules it cannot (croniter missing, an expression or a time zone it cannot read:
    system checks E021 to E024)."""
    specs: list[ScheduleSpec] = []
    problems: list[str] = []
    for cls in sorted(registry.all(), key=lambda c: c.name):
        options = WorkflowOptions.of(cls)
        if options.schedules_refused is not None:
            problems.append(f"{cls.name}: {options.schedules_refused}")
        specs.extend(options.schedules)
    return specs, problems


def ensure_rows(specs: list[ScheduleSpec], now: datetime) -> dict[tuple[str, str], tuple[int, datetime]]:
    """``{(workflow, key): (row pk, next slot)}`` for ``specs``, making the missing rows with their first
    slot after ``now`` (a schedule does not catch up on the time before it was first seen)."""
    if not specs:
        return {}
    names = sorted({spec.workflow_name for spec in specs})
    wanted = {(spec.workflow_name, spec.key) for spec in specs}

    def read() -> dict[tuple[str, str], tuple[int, datetime]]:
        rows = Schedule.objects.filter(workflow_name__in=names).values_list("workflow_name", "key", "pk",
                                                                              "next_slot")
        return {(name, key): (pk, next_slot) for name, key, pk, next_slot in rows if (name, key) in wanted}

    found = read()
    missing = [spec for spec in specs if (spec.workflow_name, spec.key) not in found]
    if not missing:
        return found
    Schedule.objects.using(_alias()).bulk_create(
        [Schedule(workflow_name=spec.workflow_name, key=spec.key, cron=spec.expression,
                  timezone=spec.timezone, next_slot=spec.cron.after(now), created_at=now, updated_at=now)
         for spec in missing],
        ignore_conflicts=True,  # another worker made it meanwhile: its row is as good
    )
    return read()


@dataclass
class Round:
    """What one round did: the slots it created instances for, whether the catch-up policy skipped
    missed slots, and the schedule's next slot afterwards (None: its row is gone)."""

    created: list[datetime]
    skipped: bool
    next_slot: datetime | None


def run_round(spec: ScheduleSpec, pk: int, now: datetime, on_time: timedelta = ON_TIME) -> Round:
    """Create the due slots of one schedule, if no other worker did."""
    try:
        return _round(spec, pk, now, on_time, skip_existing=False)
    except IntegrityError:
        # A slot's id exists already: the round was rolled back whole; do it again around those ids.
        return _round(spec, pk, now, on_time, skip_existing=True)


def _round(spec: ScheduleSpec, pk: int, now: datetime, on_time: timedelta, skip_existing: bool) -> Round:
    alias = _alias()
    with transaction.atomic(using=alias):
        locked = list(Schedule.objects.using(alias).select_for_update().filter(pk=pk)
                      .values_list("next_slot", flat=True))
        if not locked:
            return Round([], False, None)
        next_slot = locked[0]
        if next_slot > now:
            return Round([], False, next_slot)  # another worker dealt with it
        decided = plan(spec.cron, spec.catch_up, next_slot, now, on_time)
        ids = {slot: slot_instance_id(spec.key, slot) for slot in decided.slots}
        existing = set()
        if skip_existing and ids:
            existing = set(Instance.objects.using(alias).for_workflow(spec.workflow_name)
                           .filter(instance_id__in=ids.values()).values_list("instance_id", flat=True))
        created = []
        for slot, instance_id in ids.items():
            if instance_id in existing:
                continue
            params = slot_params(spec.expression, spec.timezone, slot)
            instance = Instance(workflow_name=spec.workflow_name, instance_id=instance_id, params=params,
                                status=InstanceStatus.QUEUED, created_at=now, updated_at=now,
                                **_placement(spec.workflow_name, params, now))
            instance.save(force_insert=True, using=alias)
            enqueue(instance.pk)
            created.append(slot)
        changes = {"next_slot": decided.next_slot, "updated_at": now}
        if decided.slots:
            changes["last_slot"] = decided.slots[-1]
        Schedule.objects.using(alias).filter(pk=pk).update(**changes)
    return Round(created, decided.skipped, decided.next_slot)


class Scheduler:
    """A worker's view of the schedules declared in its process: each one's next slot, as last read.

    ``next_due`` is when the next round is due (None: no schedule); ``run_due(now)`` runs the rounds of
    the schedules due at ``now`` and returns how many instances it created."""

    def __init__(self, on_time: timedelta = ON_TIME):
        self.on_time = on_time
        self.synced = False
        self.entries: dict[int, list[Any]] = {}  # row pk -> [spec, next slot as last read]
        self.specs: list[ScheduleSpec] = []
        self._reported: set[str] = set()

    @property
    def next_due(self) -> datetime | None:
        return min((entry[1] for entry in self.entries.values()), default=None)

    def sync(self, now: datetime) -> None:
        """Read (and make, for a schedule seen for the first time) the rows of the declared schedules.
        No statement when the process declares none."""
        specs, problems = declared_specs()
        for problem in problems:
            if problem not in self._reported:
                self._reported.add(problem)
                logger.error("Schedules not run: %s (manage.py check says more).", problem)
        rows = ensure_rows(specs, now)
        self.specs = specs
        self.entries = {}
        for spec in specs:
            if (spec.workflow_name, spec.key) in rows:
                pk, next_slot = rows[(spec.workflow_name, spec.key)]
                self.entries[pk] = [spec, next_slot]
        self.synced = True

    def run_due(self, now: datetime) -> int:
        if not self.synced:
            self.sync(now)
        created = 0
        for pk, entry in list(self.entries.items()):
            spec, next_slot = entry
            if next_slot > now:
                continue
            try:
                done = run_round(spec, pk, now, self.on_time)
            except Exception:
                # The database restarting, say: the slot is still due in the table; look again in a
                # second, and let the rest of the worker's loop (timers, sweeps) go on meanwhile.
                logger.exception("%s: the round of schedule %r failed; trying again in %s s.",
                                 spec.workflow_name, spec.expression, RETRY_SECONDS)
                entry[1] = now + timedelta(seconds=RETRY_SECONDS)
                continue
            if done.next_slot is None:
                self.synced = False  # its row was deleted: made again at the next round
                del self.entries[pk]
                continue
            entry[1] = done.next_slot
            created += len(done.created)
            if done.skipped:
                resumed = done.created[0] if done.created else done.next_slot
                logger.warning("%s: schedule %r (%s) skipped slots missed before %s (schedule_catch_up=%r).",
                               spec.workflow_name, spec.expression, spec.timezone, resumed.isoformat(),
                               spec.catch_up)
            if done.created:
                logger.info("%s: created %s instance(s) for schedule %r, slots %s to %s.", spec.workflow_name,
                            len(done.created), spec.expression, done.created[0].isoformat(),
                            done.created[-1].isoformat())
        return created


def tick(now: datetime) -> int:
    """One round of every due schedule, for a caller that keeps no state (django-q2's scheduled
    ``tick`` under a plain ``qcluster``, which runs once a minute: slots are on time for 3 minutes there)."""
    return Scheduler(on_time=timedelta(minutes=3)).run_due(now)
