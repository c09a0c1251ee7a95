"""Creating instances and steering them: the statements behind create, pause, resume, terminate, restart.

Each change is one conditional statement (or one transaction), so two callers racing cannot both win and
a refused change leaves the instance as it was; each returns whether it applied, and the caller says why
not. Terminate and restart bump the epoch: a replay running meanwhile has its next write refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db import IntegrityError, connections, router, transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, QuerySet, Value

from django_workflows.shared import clock
from django_workflows.foundations.conf import workflow_settings
from django_workflows.foundations.control_flow import Fenced
from django_workflows.shared.error_journal import describe_error
from django_workflows.errors import InstanceTerminated
from django_workflows.executors import enqueue, enqueue_many, get_executor
from django_workflows.models import Event, Instance, InstanceStatus, ParentEndPolicy, Step
from django_workflows.store import children, instance_rows, lease_keeper, retention
from django_workflows.store.holders import holder
from django_workflows.store import tags as instance_tags
from django_workflows.shared.transitions import PAUSE, TERMINATE


def _alias() -> str:
    return router.db_for_write(Instance)


def _rows(pk: int) -> QuerySet[Instance]:
    return Instance.objects.filter(pk=pk)


def insert(instance: Instance, tags: Mapping[str, str] | None = None) -> None:
    """Insert a new instance with its ``tags`` and queue its first replay (a ``scheduled`` one's is the
    wake-up loop's to queue, at its wake time); an id its workflow already has raises ``IntegrityError``
    and changes nothing. Where that replay runs at once in this thread (the inline executor), the
    instance is created holding its lease (``instance_rows.insert_holding``): one statement fewer."""
    alias = _alias()
    starts_now = instance.status != InstanceStatus.SCHEDULED
    executor = get_executor()
    if tags or executor.enqueues_in_transaction or connections[alias].in_atomic_block:
        # The replay's task (and the tags, which a tenancy rule may read) commit with the instance;
        # inside the caller's transaction, a savepoint keeps a duplicate id from breaking it.
        with transaction.atomic(using=alias):
            instance_rows.insert(instance, alias)
            if tags:
                instance_tags.write(instance.pk, tags)
            if starts_now:
                enqueue(instance.pk)
        return
    # One INSERT in autocommit, and the replay is asked for once it has committed.
    if not (starts_now and executor.replays_at_once() and instance_rows.insert_holding(
            instance, alias, str(holder()), clock.now(), workflow_settings.LEASE_SECONDS)):
        instance_rows.insert(instance, alias)
    if starts_now:
        try:
            enqueue(instance.pk)
        finally:
            # Held for a replay that did not take it (the executor failed): it expires unrenewed.
            lease_keeper.forget_held(instance.pk)


def insert_child(child: Instance, parent_epoch: int) -> int | None:
    """Insert ``child`` (its parent link set) and queue its first replay; return its pk. Fenced as the
    journal's writes are: inserted only while the parent is at ``parent_epoch``, the epoch of the replay
    creating it; otherwise nothing is inserted and ``Fenced`` is raised. An instance of that workflow and
    id that is this parent's child already (created before a crash) is taken: its pk is returned. One that
    is not this parent's child returns None.

    The insert and the check of the parent's epoch are one transaction, the insert first:

    - PostgreSQL: the check locks the parent's row. A terminate or restart that bumped the epoch first
      makes the check fail (it waits for that commit and reads the row again), and the child is rolled
      back; one that comes later waits for this commit, and its look for the parent's children, a statement
      after its update, sees the child. The child's row is taken before the parent's, unlike elsewhere: a
      row not yet committed is invisible to a terminate, which cannot wait for it.
    - SQLite: one writer at a time, and the insert takes the write lock before the epoch is read, so no
      terminate can commit between the check and the commit. A check made first would be a read, which in
      a deferred transaction (Django's default) pins a snapshot that SQLite (in WAL mode) refuses to write
      from once another write has committed: "database is locked".

    The creation is fenced, rather than the terminate made to reach a child created meanwhile, because
    only the creation can know of both: a terminate cannot see a child whose row has not committed, while
    the creation can read its parent's epoch in the transaction that inserts the child."""
    try:
        with transaction.atomic(using=_alias()):
            child.save(force_insert=True)
            # A child has its parent set by whoever built it (children.ChildSteps.child_creator).
            assert child.parent_id is not None
            if not children.lock_parent_at(child.parent_id, parent_epoch):
                raise Fenced()
            # Within the transaction for an executor that writes its task there; else once it commits.
            enqueue(child.pk)
        return child.pk
    except IntegrityError:
        existing = (Instance.objects.for_workflow(child.workflow_name).filter(instance_id=child.instance_id)
                    .values_list("pk", "parent_id").first())
        if existing is None:
            raise
        pk, parent_id = existing
        return pk if parent_id == child.parent_id else None


def insert_batch(workflow_name: str, instances: list[Instance],
                 tags: Mapping[str, Mapping[str, str]] | None = None) -> tuple[dict[str, int], list[str]]:
    """Insert those of ``instances`` whose ids are new, with their ``tags`` (by instance id), queue their
    first replays, and return the primary key of every id of the batch, new or not, and the ids inserted.
    An id that existed keeps the tags it has."""
    ids = [instance.instance_id for instance in instances]
    with transaction.atomic(using=_alias()):
        existing = set(
            Instance.objects.for_workflow(workflow_name).filter(instance_id__in=ids)
            .values_list("instance_id", flat=True)
        )
        new = [instance for instance in instances if instance.instance_id not in existing]
        instance_rows.insert_new(new, _alias())
        rows = dict(
            Instance.objects.for_workflow(workflow_name).filter(instance_id__in=ids)
            .values_list("instance_id", "pk")
        )
        instance_tags.write_new({rows[instance.instance_id]: (tags or {}).get(instance.instance_id, {})
                                 for instance in new})
        enqueue_many([rows[instance.instance_id] for instance in new])
    return rows, [instance.instance_id for instance in new]


def successor_of(pk: int) -> tuple[str, str] | None:
    """The workflow and id of the instance that ``pk`` continued as new as, or None."""
    row = Instance.objects.filter(pk__in=_rows(pk).values("successor_id")).values_list("workflow_name", "instance_id")
    found: tuple[str, str] | None = row.first()
    return found


def status_of(pk: int) -> str | None:
    status: str | None = _rows(pk).values_list("status", flat=True).first()
    return status


def pause(pk: int, now: datetime) -> str | None:
    """At once if no replay runs; otherwise ``waitingForPause``, taken at the replay's next step. Return
    the status it left, or None if the instance could not be paused."""
    # The statuses come from the transitions table; only a running replay's own has to finish first.
    idle = [status for status in PAUSE.applies_to if status != InstanceStatus.RUNNING]
    if _rows(pk).filter(status__in=idle).update(status=InstanceStatus.PAUSED, updated_at=now):
        return InstanceStatus.PAUSED
    if _rows(pk).filter(status=InstanceStatus.RUNNING).update(status=InstanceStatus.WAITING_FOR_PAUSE,
                                                              updated_at=now):
        return InstanceStatus.WAITING_FOR_PAUSE
    return None


def resume(pk: int, now: datetime) -> str | None:
    """Queue a paused instance again (``queued``), or withdraw a pause not yet taken (``running``); None
    if there was neither."""
    with transaction.atomic(using=_alias()):
        if _rows(pk).filter(status=InstanceStatus.PAUSED).update(status=InstanceStatus.QUEUED, updated_at=now):
            enqueue(pk)
            return InstanceStatus.QUEUED
    if _rows(pk).filter(status=InstanceStatus.WAITING_FOR_PAUSE).update(status=InstanceStatus.RUNNING,
                                                                         updated_at=now):
        return InstanceStatus.RUNNING
    return None


def terminate(pk: int, now: datetime) -> bool:
    """Terminate the instance. A child workflow's parent receives its end (``terminated``) in the same
    transaction; the instance's running children whose policy is ``terminate`` are terminated with it."""
    with transaction.atomic(using=_alias()):
        parent, label = _lock_parent_of(pk)
        if not _rows(pk).filter(status__in=TERMINATE.applies_to).update(
            status=InstanceStatus.TERMINATED, terminating=False, epoch=F("epoch") + 1, lease_owner="",
            lease_expires_at=None, wake_at=None, waiting_for=None, waiting_reason=None, ended_at=now,
            updated_at=now, purge_at=retention.terminated_purge_at(now),
        ):
            return False
        if parent is not None:
            stop = InstanceTerminated(f"Instance {label} was terminated.")
            children.send_end(pk, parent, children.end_payload(InstanceStatus.TERMINATED, error=describe_error(stop)),
                              now)
        for child in _children_ending_with(pk, running=True):
            terminate(child, now)
    return True


def terminate_with_rollback(pk: int, now: datetime) -> bool:
    """Queue the instance for the replay that runs its undos and then terminates it; a replay running
    now has its further writes refused. Its running children whose policy is ``terminate`` are
    terminated with rollback too."""
    with transaction.atomic(using=_alias()):
        if not _rows(pk).filter(status__in=TERMINATE.applies_to).update(
            status=InstanceStatus.QUEUED, terminating=True, epoch=F("epoch") + 1, lease_owner="",
            lease_expires_at=None, wake_at=None, waiting_for=None, waiting_reason=None, updated_at=now,
        ):
            return False
        enqueue(pk)
        for child in _children_ending_with(pk, running=True):
            terminate_with_rollback(child, now)
    return True


def _lock_parent_of(pk: int) -> tuple[int | None, str]:
    """The instance's parent, its row locked (the parent's before the child's, as everywhere), or None for
    an instance that is no child; and the instance's name."""
    row = _rows(pk).values_list("parent_id", "workflow_name", "instance_id").first()
    if row is None:
        return None, ""
    if row[0] is not None:
        children.lock_parent(row[0])
    return row[0], f"{row[1]}/{row[2]}"


def _children_ending_with(pk: int, running: bool, steps: QuerySet[Step] | None = None) -> list[int]:
    """The children that the instance's terminate or restart reaches (policy ``terminate``): running ones
    only if ``running``; only those created by the journal rows ``steps`` if given."""
    found = Instance.objects.filter(parent_id=pk, on_parent_end=ParentEndPolicy.TERMINATE)
    if running:
        found = found.filter(status__in=TERMINATE.applies_to)
    if steps is not None:
        found = found.filter(parent_step__in=steps.values("key"))
    return list(found.values_list("pk", flat=True))


def restart(pk: int, now: datetime, from_key: str | None = None) -> bool | None:
    """Queue the instance to run again: from the top, or from the journaled step ``from_key`` on.

    From the top, its journal and consumed events go, events not yet consumed stay. From a step, the
    journal before that step stays (in journal order: the order run() first reached its steps), and
    that step, every later one and the events they consumed go. Either way an instance with a timeout
    has it again in full, from now: its deadline is measured from the restart.

    False if the instance no longer exists or continued as new (its successor carries the family on, and
    the family's history stays as it ran); None if it has no step ``from_key``; either way nothing changed."""
    with transaction.atomic(using=_alias()):
        journal = Step.objects.filter(instance_id=pk)
        if from_key is not None:
            first = journal.filter(key=from_key).values_list("id", flat=True).first()
            if first is None:
                return None if _rows(pk).exists() else False
            journal = journal.filter(id__gte=first)
        # From a step, the instance has started already, and keeps when it did.
        kept_start = {} if from_key is not None else {"started_at": None}
        updated = _rows(pk).filter(successor__isnull=True).update(
            status=InstanceStatus.QUEUED, epoch=F("epoch") + 1, lease_owner="", lease_expires_at=None,
            wake_at=None, waiting_for=None, waiting_reason=None, current_step="", output=None, error=None,
            traceback="", ended_at=None, purge_at=None, updated_at=now, terminating=False,
            # NULL for an instance without a timeout, as the sum of anything with NULL is.
            deadline=ExpressionWrapper(Value(now, output_field=DateTimeField()) + F("timeout"),
                                       output_field=DateTimeField()),
            **kept_start,
        )
        if not updated:
            return False
        # The children the cleared steps created: those whose policy is terminate run again too (and
        # their ends are forgotten); the others keep running, and the ends they sent are taken again.
        restarted = _children_ending_with(pk, running=False, steps=None if from_key is None else journal)
        Event.objects.filter(instance_id=pk, type__in=[children.end_event_type(c) for c in restarted]).delete()
        Event.objects.filter(instance_id=pk, type__startswith=children.CHILD_EVENT_PREFIX,
                             consumed_by__in=journal.values("id")).update(consumed_by=None, consumed_at=None)
        if from_key is None:
            Event.objects.filter(instance_id=pk, consumed_by__isnull=False).delete()
        else:
            Event.objects.filter(instance_id=pk, consumed_by__in=journal.values("id")).delete()
        journal.delete()
        enqueue(pk)
        for child in restarted:
            restart(child, now)
    return True
