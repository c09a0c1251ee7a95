"""Starting and steering instances: the Python twin of Cloudflare's Workflow binding.

    from django_workflows import workflows
    instance = workflows.get("payment-approval").create(params={"amount": 120})
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.db import IntegrityError, connections, router, transaction
from django.db.models import F

from django_workflows import clock
from django_workflows.conf import workflow_settings
from django_workflows.definition import registry
from django_workflows.engine import enqueue, validate_event_type
from django_workflows.errors import (
    DuplicateDelivery,
    InstanceAlreadyExists,
    InstanceNotFound,
    InvalidEvent,
    InvalidParams,
    InvalidTransition,
)
from django_workflows.executors import get_executor
from django_workflows.models import FINISHED_STATUSES, Event, Instance, InstanceStatus, Step
from django_workflows.serialization import NotJournalable, encode

MAX_INSTANCE_ID = 100
MAX_BATCH = 100
INSTANCE_ID_PATTERN = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9-_]*$")
ACTIVE_STATUSES = (
    InstanceStatus.QUEUED,
    InstanceStatus.RUNNING,
    InstanceStatus.PAUSED,
    InstanceStatus.WAITING_FOR_PAUSE,
    InstanceStatus.WAITING,
)


def _alias() -> str:
    return router.db_for_write(Instance)


def validate_instance_id(value) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_INSTANCE_ID
        or not INSTANCE_ID_PATTERN.fullmatch(value)  # match() would let a trailing newline through
    ):
        raise InvalidParams(
            f"Invalid instance id {value!r}: use 1 to {MAX_INSTANCE_ID} characters of letters, digits, '-' "
            "and '_', not starting with '-'.",
            instance_id=value,
        )
    return value


def _check_json(value, limit: int, what: str, error_class) -> None:
    try:
        encode(value, limit)
    except NotJournalable as exc:
        raise error_class(f"{what} {exc}", too_large=exc.too_large) from None


class WorkflowHandle:
    """One workflow, by name: create instances of it and look them up."""

    def __init__(self, name: str):
        self.workflow_class = registry.get(name)
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name}>"

    def _new_instance(self, instance_id, params) -> Instance:
        instance_id = str(uuid.uuid4()) if instance_id is None else validate_instance_id(instance_id)
        _check_json(params, workflow_settings.MAX_PARAMS_SIZE, f"The params of instance {instance_id!r}",
                    InvalidParams)
        now = clock.now()
        return Instance(workflow_name=self.name, instance_id=instance_id, params=params,
                        status=InstanceStatus.QUEUED, created_at=now, updated_at=now)

    def create(self, id: str | None = None, params: Any = None) -> InstanceHandle:  # noqa: A002
        """Create an instance and queue its first replay. An id that exists is an error."""
        instance = self._new_instance(id, params)
        alias = _alias()
        try:
            if get_executor().enqueues_in_transaction or connections[alias].in_atomic_block:
                # The replay's task commits with the instance; inside the caller's transaction, a
                # savepoint keeps a duplicate id from breaking it.
                with transaction.atomic(using=alias):
                    instance.save(force_insert=True)
                    enqueue(instance.pk)
            else:
                # One INSERT in autocommit, and the replay is asked for once it has committed.
                instance.save(force_insert=True)
                enqueue(instance.pk)
        except IntegrityError:
            raise InstanceAlreadyExists(
                f"Workflow {self.name!r} already has an instance with id {instance.instance_id!r}; "
                "pick another id, or get() the existing one.",
                workflow=self.name, instance_id=instance.instance_id,
            ) from None
        return InstanceHandle(instance)

    def create_batch(self, batch) -> list[InstanceHandle]:
        """Create up to 100 instances from ``[{"id": ..., "params": ...}, ...]``.

        Ids that already exist are skipped, so sending the same batch twice creates
        each instance once. Returns a handle for every item, in order.
        """
        batch = list(batch)
        if len(batch) > MAX_BATCH:
            raise InvalidParams(f"A batch holds at most {MAX_BATCH} instances, got {len(batch)}; split it.")
        instances = []
        for item in batch:
            if not isinstance(item, dict) or set(item) - {"id", "params"}:
                raise InvalidParams(f"Each batch item must be a dict with 'id' and/or 'params', got {item!r}")
            instances.append(self._new_instance(item.get("id"), item.get("params")))
        ids = [instance.instance_id for instance in instances]
        if len(set(ids)) != len(ids):
            raise InvalidParams("The batch repeats an instance id; each id may appear once.")
        with transaction.atomic(using=_alias()):
            existing = set(
                Instance.objects.for_workflow(self.name).filter(instance_id__in=ids).values_list("instance_id", flat=True)
            )
            new = [instance for instance in instances if instance.instance_id not in existing]
            Instance.objects.bulk_create(new, ignore_conflicts=True)
            rows = dict(
                Instance.objects.for_workflow(self.name).filter(instance_id__in=ids).values_list("instance_id", "pk")
            )
            for instance in new:
                enqueue(rows[instance.instance_id])
        return [InstanceHandle.from_row(self.name, instance_id, rows[instance_id]) for instance_id in ids]

    def get(self, id: str) -> InstanceHandle:  # noqa: A002
        """The instance with that id; a missing id is an ``InstanceNotFound``."""
        try:
            pk = Instance.objects.for_workflow(self.name).values_list("pk", flat=True).get(instance_id=id)
        except Instance.DoesNotExist:
            raise InstanceNotFound(
                f"Workflow {self.name!r} has no instance with id {id!r}.", workflow=self.name, instance_id=id
            ) from None
        return InstanceHandle.from_row(self.name, id, pk)


class InstanceHandle:
    """One instance: read its status and steer it. Every change goes through a conditional update,
    so two callers racing cannot both win, and a refused change leaves the instance as it was."""

    def __init__(self, instance: Instance):
        self.pk = instance.pk
        self.id = instance.instance_id
        self.workflow_name = instance.workflow_name

    @classmethod
    def from_row(cls, workflow_name: str, instance_id: str, pk: int) -> InstanceHandle:
        handle = cls.__new__(cls)
        handle.pk, handle.id, handle.workflow_name = pk, instance_id, workflow_name
        return handle

    def __repr__(self) -> str:
        return f"<InstanceHandle {self.workflow_name}/{self.id}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, InstanceHandle) and other.pk == self.pk

    def __hash__(self) -> int:
        return hash(self.pk)

    def _rows(self):
        return Instance.objects.filter(pk=self.pk)

    def _current_status(self) -> str:
        status = self._rows().values_list("status", flat=True).first()
        if status is None:
            raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                   workflow=self.workflow_name, instance_id=self.id)
        return status

    def _refuse(self, action: str, allowed) -> InvalidTransition:
        status = self._current_status()
        return InvalidTransition(
            f"Cannot {action} instance {self.workflow_name}/{self.id}: it is {status}; "
            f"{action} applies to an instance that is {' or '.join(allowed)}.",
            workflow=self.workflow_name, instance_id=self.id, status=status, action=action,
        )

    def status(self) -> dict:
        """``{status, output, error}``, with Cloudflare's status values."""
        row = self._rows().values("status", "output", "error").first()
        if row is None:
            raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                   workflow=self.workflow_name, instance_id=self.id)
        return row

    def pause(self) -> None:
        """Pause: at once if no replay runs; otherwise after its current step (``waitingForPause``)."""
        now = clock.now()
        if self._rows().filter(status__in=(InstanceStatus.QUEUED, InstanceStatus.WAITING)).update(
            status=InstanceStatus.PAUSED, updated_at=now
        ):
            return
        if self._rows().filter(status=InstanceStatus.RUNNING).update(
            status=InstanceStatus.WAITING_FOR_PAUSE, updated_at=now
        ):
            return
        raise self._refuse("pause", ("queued", "running", "waiting"))

    def resume(self) -> None:
        """Resume a paused instance (or withdraw a pause not yet taken effect)."""
        now = clock.now()
        with transaction.atomic(using=_alias()):
            if self._rows().filter(status=InstanceStatus.PAUSED).update(status=InstanceStatus.QUEUED, updated_at=now):
                enqueue(self.pk)
                return
        if self._rows().filter(status=InstanceStatus.WAITING_FOR_PAUSE).update(
            status=InstanceStatus.RUNNING, updated_at=now
        ):
            return
        raise self._refuse("resume", ("paused", "waitingForPause"))

    def terminate(self) -> None:
        """Stop the instance for good. A replay running now has its further writes refused."""
        now = clock.now()
        if not self._rows().filter(status__in=ACTIVE_STATUSES).update(
            status=InstanceStatus.TERMINATED, epoch=F("epoch") + 1, lease_owner="", lease_expires_at=None,
            wake_at=None, waiting_for=None, waiting_reason=None, ended_at=now, updated_at=now,
        ):
            raise self._refuse("terminate", [str(s) for s in ACTIVE_STATUSES])

    def restart(self) -> None:
        """Run the instance again from the top: its journal and consumed events are cleared,
        events not yet consumed are kept."""
        now = clock.now()
        with transaction.atomic(using=_alias()):
            updated = self._rows().update(
                status=InstanceStatus.QUEUED, epoch=F("epoch") + 1, lease_owner="", lease_expires_at=None,
                wake_at=None, waiting_for=None, waiting_reason=None, current_step="", output=None, error=None, traceback="",
                started_at=None, ended_at=None, updated_at=now,
            )
            if not updated:
                self._current_status()  # raises InstanceNotFound
            Event.objects.filter(instance_id=self.pk, consumed_by__isnull=False).delete()
            Step.objects.filter(instance_id=self.pk).delete()
            enqueue(self.pk)

    def send_event(self, type: str, payload: Any = None, *, sender: str = "",  # noqa: A002
                   delivery: str | None = None) -> None:
        """Deliver an event: kept in the inbox, and the instance woken if it waits for this type.

        ``delivery`` identifies a delivery that must be stored at most once (a signed webhook): a second
        event with the same one is refused with ``DuplicateDelivery`` and changes nothing.
        """
        validate_event_type(type)
        _check_json(payload, workflow_settings.MAX_EVENT_PAYLOAD_SIZE, f"The payload of event {type!r}",
                    InvalidEvent)
        try:
            self._store_event(type, payload, sender, delivery)
        except IntegrityError:
            # The unique delivery column decides, not a look beforehand: a concurrent twin of this
            # request may have been stored in between.
            if delivery is None or not Event.objects.filter(delivery=delivery).exists():
                raise
            raise DuplicateDelivery(
                f"This delivery of event {type!r} was already received; nothing was stored again.",
                workflow=self.workflow_name, instance_id=self.id, delivery=delivery,
            ) from None

    def _store_event(self, type, payload, sender, delivery) -> None:  # noqa: A002
        now = clock.now()
        with transaction.atomic(using=_alias()):
            # Locking the row orders this event against a replay suspending on its wait: either the
            # replay's inbox check sees this event, or this sees the instance waiting and wakes it.
            row = self._rows().select_for_update().values("status", "waiting_for").first()
            if row is None:
                raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                       workflow=self.workflow_name, instance_id=self.id)
            if row["status"] in FINISHED_STATUSES:
                raise InvalidTransition(
                    f"Cannot send event {type!r} to instance {self.workflow_name}/{self.id}: it is "
                    f"{row['status']} and will not wait for events again.",
                    workflow=self.workflow_name, instance_id=self.id, status=row["status"], action="send_event",
                )
            Event.objects.create(instance_id=self.pk, type=type, payload=payload, received_at=now, sender=sender,
                                 delivery=delivery)
            if row["status"] == InstanceStatus.WAITING and type in (row["waiting_for"] or ()):
                # Queued, so that the sweeper re-enqueues it should the replay task be lost.
                self._rows().update(status=InstanceStatus.QUEUED, updated_at=now)
                enqueue(self.pk)


class Workflows:
    """``django_workflows.workflows``: the registry of workflows, by name."""

    def get(self, name: str) -> WorkflowHandle:
        return WorkflowHandle(name)

    def names(self) -> list[str]:
        return registry.names()

    def __iter__(self):
        return iter(WorkflowHandle(name) for name in registry.names())


workflows = Workflows()
