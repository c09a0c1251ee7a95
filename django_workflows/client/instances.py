"""Starting and steering instances: the Python twin of Cloudflare's Workflow binding.

    from django_workflows import workflows
    instance = workflows.get("payment-approval").create(params={"amount": 120})
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    output = instance.result(timeout=60)

Each method that touches the database has an async twin (``acreate``, ``astatus``, ``asend_event``,
``aresult``...): ``django_workflows.async_client``.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, router

from django_workflows import signals
from django_workflows.shared import clock, declared_events, lifecycle
from django_workflows.client import sending, starts
from django_workflows.client.async_methods import AsyncInstanceMethods, AsyncWorkflowMethods
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import registry
from django_workflows.engine.read_back import read_back
from django_workflows.shared.error_journal import rollback_of
from django_workflows.errors import (
    InstanceAlreadyExists,
    InstanceNotFound,
    InvalidParams,
    InvalidTransition,
    StepNotFound,
)
from django_workflows.models import Instance, InstanceStatus
from django_workflows.client.new_instances import check_params, new_instance, starting_at
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.serialization import revive
from django_workflows.store import debounce as debouncing
from django_workflows.store import inbox, steering
from django_workflows.store import progress as instance_progress
from django_workflows.shared.transitions import TRANSITIONS
from django_workflows.client.sending import SentEvent
from django_workflows.foundations.tag_rules import validate_tags
from django_workflows.foundations.validation import validate_instance_id, validate_step_name

MAX_BATCH = 100
BATCH_KEYS = ("id", "params", "retention", "subject", "tags", "timeout", "priority", "queue")

class WorkflowHandle(AsyncWorkflowMethods):
    """One workflow, by name: create instances of it and look them up."""

    def __init__(self, name: str):
        self.workflow_class = registry.get(name)
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name}>"

    def create(self, id: str | None = None, params: Any = None,  # noqa: A002
               retention: dict | None = None, *, subject: Any = None,
               tags: dict[str, str] | None = None, timeout: Any = None, start_at: Any = None,
               start_in: Any = None, debounce: dict | None = None, priority: int | None = None,
               queue: str | None = None) -> InstanceHandle:
        """Create an instance and queue its first replay. An id that exists is an error.

        ``retention`` chooses how long the instance is kept once it has finished, by how it ended,
        instead of the ``RETENTION_DAYS`` setting: ``{"success": "3 days", "error": "30 days"}``.
        ``"success"`` applies to a ``complete`` instance; ``"error"`` to an ``errored`` one and to a
        ``terminated`` one (it did not succeed either, and is kept for looking into). Each is
        milliseconds or "N unit(s)", from zero (deleted by the next retention sweep) to 365 days. An
        outcome left out (or None) follows the setting; one given applies even when the setting is None
        (keep for ever). A key or a duration it cannot take raises ``InvalidParams`` and creates
        nothing.

        The instance records the code version it is created under: the workflow class's ``version``,
        else the ``VERSION`` setting (``Instance.version``).

        ``subject`` binds the instance to the row it is about, a saved model instance (``subject=order``):
        ``Instance.objects.for_subject(order)`` finds it, and so do the admin's ``WorkflowInstancesInline``
        on the order's page and the API's ``?subject=shop.order:42``. ``tags`` are short strings it is
        searched by, ``{"tenant": "acme"}`` (``django_workflows.foundations.tag_rules``); ``step.set_tags`` adds more.
        A subject or tags it cannot take raise ``InvalidSubject`` / ``InvalidTags`` and create nothing.

        ``timeout`` (milliseconds, "N unit(s)" or a timedelta, up to 10 years) gives this instance a
        deadline instead of its workflow's ``timeout``: past it, it ends errored with
        ``WorkflowTimeoutError`` (``django_workflows.shared.deadlines``). One it cannot take raises
        ``InvalidParams`` and creates nothing.

        ``start_at`` (an aware datetime) or ``start_in`` (a duration) creates it ``scheduled``, to start
        then (at once if that has passed); its deadline counts from then. ``debounce={"key": ...,
        "period": "30 seconds"}`` collapses the triggers of one key: the first creates a scheduled
        instance, each within ``period`` of the last joins it (its params win, or ``"merge"``'s) and moves
        its start to ``period`` after itself (``"max_wait"`` caps it); the handle is that instance's,
        ``joined`` true for a trigger that joined (docs/how-to/delayed-start-and-debounce.md).

        ``priority`` (0 to 9, higher first) and ``queue`` override the workflow class's
        (``django_workflows.shared.routing``); a value out of range, or a queue the project does not have, raises
        ``InvalidParams``, as do params without the key of a keyed limit, and create nothing."""
        checked_tags = {key: value for key, value in validate_tags(tags, "create(tags=...)").items()
                        if value is not None}
        start = starts.read_start(start_at, start_in, debounce, instance_id=id)
        instance = new_instance(self.workflow_class, self.name, id, params, retention, subject, timeout,
                                checked_tags, priority, queue)
        starting_at(instance, start.wake_at(instance.created_at))
        if start.debounce is not None:
            return self._trigger(instance, checked_tags, start.debounce, params)
        try:
            steering.insert(instance, checked_tags)
        except IntegrityError:
            raise InstanceAlreadyExists(
                f"Workflow {self.name!r} already has an instance with id {instance.instance_id!r}; "
                "pick another id, or get() the existing one.",
                workflow=self.name, instance_id=instance.instance_id,
            ) from None
        handle = InstanceHandle(instance, self.workflow_class)
        handle._announce(signals.instance_created, lifecycle.DEBUG, "created")
        return handle

    def _trigger(self, instance: Instance, tags: dict[str, str], debounce: starts.Debounce,
                 params: Any) -> InstanceHandle:
        """One trigger of ``create(debounce=...)``: the handle of the instance it created or joined."""
        instance.debounce_key = debounce.key
        merge, user_merge = None, debounce.merge
        if user_merge is not None:
            def merge(stored: Any) -> Any:
                return check_params(instance.instance_id, user_merge(revive(stored), params))
        pk, instance_id, joined = debouncing.trigger(instance, tags, debounce.period, debounce.max_wait, merge,
                                                     instance.created_at)
        handle = InstanceHandle.from_row(self.name, instance_id, pk, self.workflow_class)
        handle.joined = joined
        if joined:
            handle._announce(None, lifecycle.DEBUG, "debounced: a trigger with key %r joined it", debounce.key)
        else:
            handle._announce(signals.instance_created, lifecycle.DEBUG, "created")
        return handle

    def create_batch(self, batch) -> list[InstanceHandle]:
        """Create up to 100 instances from ``[{"id": ..., "params": ..., "retention": ..., "subject": ...,
        "tags": ..., "timeout": ...}, ...]`` (each key optional; each as ``create()`` takes it).

        Ids that already exist are skipped, so sending the same batch twice creates each instance once
        (an item skipped keeps the subject and tags it was created with). Returns a handle for every item,
        in order. An item it cannot take raises ``InvalidParams`` (``InvalidSubject``, ``InvalidTags``) and
        creates none of the batch.
        """
        batch = list(batch)
        if len(batch) > MAX_BATCH:
            raise InvalidParams(f"A batch holds at most {MAX_BATCH} instances, got {len(batch)}; split it.")
        instances, tags = [], {}
        for item in batch:
            if not isinstance(item, dict) or set(item).difference(BATCH_KEYS):
                raise InvalidParams(f"Each batch item must be a dict with {', '.join(map(repr, BATCH_KEYS))} "
                                    f"(each optional), got {item!r}")
            item_tags = validate_tags(item.get("tags"), "create_batch(tags=...)")
            kept_tags = {key: value for key, value in item_tags.items() if value is not None}
            instance = new_instance(self.workflow_class, self.name, item.get("id"), item.get("params"),
                                    item.get("retention"), item.get("subject"), item.get("timeout"), kept_tags,
                                    item.get("priority"), item.get("queue"))
            instances.append(instance)
            tags[instance.instance_id] = kept_tags
        ids = [instance.instance_id for instance in instances]
        if len(set(ids)) != len(ids):
            raise InvalidParams("The batch repeats an instance id; each id may appear once.")
        rows, created = steering.insert_batch(self.name, instances, tags)
        handles = [InstanceHandle.from_row(self.name, instance_id, rows[instance_id], self.workflow_class)
                   for instance_id in ids]
        for handle in handles:
            if handle.id in created:
                handle._announce(signals.instance_created, lifecycle.DEBUG, "created")
        return handles

    def get(self, id: str) -> InstanceHandle:  # noqa: A002
        """The instance with that id; a missing id is an ``InstanceNotFound``."""
        try:
            pk = Instance.objects.for_workflow(self.name).values_list("pk", flat=True).get(instance_id=id)
        except Instance.DoesNotExist:
            raise InstanceNotFound(
                f"Workflow {self.name!r} has no instance with id {id!r}.", workflow=self.name, instance_id=id
            ) from None
        return InstanceHandle.from_row(self.name, id, pk, self.workflow_class)


class InstanceHandle(AsyncInstanceMethods):
    """One instance: read its status and steer it. Every change goes through a conditional update,
    so two callers racing cannot both win, and a refused change leaves the instance as it was."""

    joined = False
    """True on the handle ``create(debounce=...)`` returns when the trigger joined an instance that an
    earlier trigger created."""

    def __init__(self, instance: Instance, workflow_class: type | None = None):
        self.pk = instance.pk
        self.id = instance.instance_id
        self.workflow_name = instance.workflow_name
        # The class the handle was found through, so that sending an event need not look it up again;
        # None when the handle was built from a row (send_event looks it up, if it is still defined).
        self.workflow_class = workflow_class

    @classmethod
    def from_row(cls, workflow_name: str, instance_id: str, pk: int,
                 workflow_class: type | None = None) -> InstanceHandle:
        handle = cls.__new__(cls)
        handle.pk, handle.id, handle.workflow_name = pk, instance_id, workflow_name
        handle.workflow_class = workflow_class
        return handle

    def __repr__(self) -> str:
        return f"<InstanceHandle {self.workflow_name}/{self.id}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, InstanceHandle) and other.pk == self.pk

    def __hash__(self) -> int:
        return hash(self.pk)

    def _rows(self):
        return Instance.objects.filter(pk=self.pk)

    def _announce(self, signal, level: int, message: str, *args, **kwargs) -> None:
        """Send ``signal`` and log ``message`` once the change has committed."""
        lifecycle.announce(signal, self.pk, self.id, self.workflow_name, level, message, *args,
                           using=router.db_for_write(Instance), **kwargs)

    def _current_status(self) -> str:
        status = steering.status_of(self.pk)
        if status is None:
            raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                   workflow=self.workflow_name, instance_id=self.id)
        return status

    def _refuse(self, action: str) -> InvalidTransition:
        status = self._current_status()
        return InvalidTransition(
            TRANSITIONS[action].refusal(f"{self.workflow_name}/{self.id}", status),
            workflow=self.workflow_name, instance_id=self.id, status=status, action=action,
        )

    def status(self) -> dict:
        """``{status, output, error}``, as Cloudflare's ``status()``: its status values, the error as
        ``{name, message}`` (``WorkflowTimeoutError`` past its deadline), and, once a rollback ran,
        ``rollback`` as ``{outcome, error}`` (absent otherwise, as Cloudflare leaves it out). An instance
        of a family (``step.continue_as_new``) has ``predecessor`` and ``successor`` too: the ids of the
        instances before and after it (None at either end)."""
        row = self._rows().values("status", "output", "error", "predecessor__instance_id",
                                  "successor__instance_id").first()
        if row is None:
            raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                   workflow=self.workflow_name, instance_id=self.id)
        # A large output read back from its file, then its typed values revived.
        row["output"] = read_back(row["output"], True, lambda: f"instance {self.workflow_name}/{self.id}, output")
        predecessor, successor = row.pop("predecessor__instance_id"), row.pop("successor__instance_id")
        if predecessor is not None or successor is not None:
            row.update(predecessor=predecessor, successor=successor)
        rollback = rollback_of(row["error"])
        return row if rollback is None else {**row, "rollback": rollback}

    def progress(self) -> dict | None:
        """The latest ``step.progress`` of the instance, ``{"value": ..., "at": datetime}`` (the value's typed
        values revived), or None if it has reported none (since its last restart)."""
        latest = instance_progress.latest(self.pk)
        if latest is None:
            return None
        value = read_back(latest.value, True, lambda: f"instance {self.workflow_name}/{self.id}, progress")
        return {"value": value, "at": latest.at}

    def pause(self) -> None:
        """Pause: at once if no replay runs; otherwise after its current step (``waitingForPause``)."""
        status = steering.pause(self.pk, clock.now())
        if status is None:
            raise self._refuse("pause")
        if status == InstanceStatus.PAUSED:
            self._announce(signals.instance_paused, lifecycle.INFO, "paused", step_key="")
        # Otherwise the replay running now pauses it at its next step, and says so.

    def resume(self) -> None:
        """Resume a paused instance (or withdraw a pause not yet taken effect)."""
        status = steering.resume(self.pk, clock.now())
        if status is None:
            raise self._refuse("resume")
        if status == InstanceStatus.QUEUED:
            self._announce(signals.instance_resumed, lifecycle.INFO, "resumed")

    def terminate(self, rollback: bool = False) -> None:
        """Stop the instance for good. A replay running now has its further writes refused.

        ``rollback=True`` first runs the undos of its steps that succeeded with one (last first, each a
        durable step): the instance is queued for that replay, and ends ``terminated`` once they ran."""
        stop = steering.terminate_with_rollback if rollback else steering.terminate
        if not stop(self.pk, clock.now()):
            raise self._refuse("terminate")
        if rollback:
            # Terminated by the replay that runs the undos, which sends instance_terminated.
            self._announce(None, lifecycle.INFO, "terminating: queued to roll back its steps")
        else:
            self._announce(signals.instance_terminated, lifecycle.INFO, "terminated", rollback=None)

    def restart(self, from_step: str | None = None, count: int = 1) -> None:
        """Run the instance again: from the top (its journal and consumed events are cleared, events
        not yet consumed are kept), or from the ``count``-th step named ``from_step`` (the journal
        before it is kept; it, the steps after it and the events they consumed are cleared)."""
        from_key = None
        if from_step is not None:
            validate_step_name(from_step)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise InvalidParams(f"restart(from_step={from_step!r}, count=...): count must be a whole number "
                                    f"from 1 (the first step of that name), got {count!r}")
            from_key = f"{from_step}-{count}"
        restarted = steering.restart(self.pk, clock.now(), from_key)
        if restarted is None:
            raise StepNotFound(
                f"Instance {self.workflow_name}/{self.id} has no step {from_step!r} #{count} in its journal; "
                "nothing changed. Restart from a step it has run (see its steps), or from the top.",
                workflow=self.workflow_name, instance_id=self.id, step=from_step, count=count,
            )
        if not restarted:
            continued = steering.successor_of(self.pk)
            if continued is not None:
                raise InvalidTransition(
                    f"Cannot restart instance {self.workflow_name}/{self.id}: it continued as new as "
                    f"{continued[0]}/{continued[1]}, which carries its family on; restart or steer that one.",
                    workflow=self.workflow_name, instance_id=self.id, status=InstanceStatus.COMPLETE, action="restart")
            self._current_status()  # raises InstanceNotFound
            return
        self._announce(signals.instance_restarted, lifecycle.INFO, "restarted from %s",
                       "the top" if from_key is None else f"step {from_key!r}", from_step=from_key)

    def send_event(self, type: str, payload: Any = None, *, channel: str = declared_events.PYTHON,  # noqa: A002
                   user=None, sender: str | None = None, delivery: str | None = None,
                   idempotency_key: str | None = None) -> SentEvent:
        """Deliver an event: kept in the inbox, and the instance woken if it waits for this type.
        Returns the stored event's id (a ``SentEvent``: an ``int`` that also tells its ``sender`` and
        whether it was ``repeated``).

        ``channel`` (``"python"``, ``"api"``, ``"webhook"``, ``"admin"``, ``"cli"``) and ``user`` (a
        Django user) say who sends it and how: the user needs the ``django_workflows.send_event``
        permission, and the workflow's declared events decide which types that channel and user may
        send (``EventRefused``). Python code that names no user is trusted: no permission or channel
        applies. The event is recorded as sent by ``sender`` if given, else by ``"<channel>:<username>"``
        when a user is named, else by no one (``""``).

        ``idempotency_key`` stores the event once per channel, instance and key, for a sender that may
        send it again (a timeout, a provider's retry): a repeat of the same type and payload (compared as
        canonical JSON: ``true`` is not ``1``) returns the first event's id and stores nothing; a repeat
        with another type or payload is ``IdempotencyKeyReused``. ``delivery`` identifies a signed
        webhook's delivery, stored at most once whatever its key: the same one again, to any instance,
        is refused with ``DuplicateDelivery`` and changes nothing. Both are remembered through restarts.

        The inbox's quotas (``MAX_PENDING_EVENTS`` and its per-sender and per-type shares) refuse an event
        with ``InboxFull``; an approval, a webhook or a type the instance waits for is refused only when
        its own sender has filled its share.

        The type, the sender and the payload are checked before anything is stored, in that order
        (``django_workflows.client.sending``); a refusal stores nothing.
        """
        return sending.send(self, type, payload, channel=channel, user=user, sender=sender, delivery=delivery,
                            idempotency_key=idempotency_key)

    def discard_events(self, event_ids: list[int] | None = None, *,
                       sender: str | None = None) -> list[tuple[int, str, str]]:
        """Delete events from the inbox that no wait has taken yet: those of ``event_ids``, or every one
        sent by ``sender`` (a flood to clear). Returns ``(id, type, sender)`` of each deleted, for the
        caller's audit; an event a wait took meanwhile stays, and what the inbox was sent is still
        remembered (a discarded delivery posted again is still refused)."""
        if (event_ids is None) == (sender is None):
            raise TypeError("discard_events() takes event ids or a sender, not both or neither.")
        return inbox.discard(self.pk, event_ids=event_ids, sender=sender)


class Workflows:
    """``django_workflows.workflows``: the registry of workflows, by name."""

    def get(self, name: str) -> WorkflowHandle:
        return WorkflowHandle(name)

    def names(self) -> list[str]:
        return registry.names()

    def __iter__(self):
        return iter(WorkflowHandle(name) for name in registry.names())


workflows = Workflows()
