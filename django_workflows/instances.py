"""Starting and steering instances: the Python twin of Cloudflare's Workflow binding.

    from django_workflows import workflows
    instance = workflows.get("payment-approval").create(params={"amount": 120})
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, router

from django_workflows import clock, declared_events, lifecycle, sending, signals, subjects
from django_workflows.conf import workflow_settings
from django_workflows.definition import registry
from django_workflows.engine.stored_values import read_back
from django_workflows.durations import parse_duration
from django_workflows.error_journal import rollback_of
from django_workflows.errors import (
    InstanceAlreadyExists,
    InstanceNotFound,
    InvalidParams,
    InvalidStepInput,
    InvalidTransition,
    ParamsTooLarge,
    StepNotFound,
)
from django_workflows.models import Instance, InstanceStatus
from django_workflows.options import WorkflowOptions, place
from django_workflows.serialization import NotJournalable, dump
from django_workflows.store import inbox, steering
from django_workflows.transitions import TRANSITIONS
from django_workflows.sending import SentEvent
from django_workflows.tags import validate_tags
from django_workflows.validation import validate_instance_id, validate_step_name

MAX_BATCH = 100
BATCH_KEYS = ("id", "params", "retention", "subject", "tags", "priority", "queue")

MAX_RETENTION = timedelta(days=365)
"""The longest retention an instance may choose for itself (``create(retention=...)``)."""

RETENTION_OUTCOMES = ("success", "error")
# Cloudflare's binding spells the keys successRetention and errorRetention; its REST API
# success_retention and error_retention. Named in the refusal, so that ported code is told the key here.
_CLOUDFLARE_RETENTION_KEYS = {"successRetention": "success", "success_retention": "success",
                              "errorRetention": "error", "error_retention": "error"}


def parse_retention_duration(outcome: str, value) -> timedelta:
    """One duration of a ``retention``: milliseconds or "N unit(s)", from zero to ``MAX_RETENTION``;
    anything else is ``InvalidParams``."""
    what = f"retention[{outcome!r}]"
    try:
        delta = parse_duration(value, what=what)
    except InvalidStepInput as exc:
        raise InvalidParams(str(exc), outcome=outcome) from None
    except OverflowError:
        delta = None  # past what a timedelta holds: longer than any retention
    if delta is None or delta > MAX_RETENTION:
        raise InvalidParams(
            f"{what}: {value!r} is longer than the {MAX_RETENTION.days} days an instance may keep itself; "
            f"leave it out to follow the RETENTION_DAYS setting.", outcome=outcome)
    return delta


def parse_retention(retention) -> dict[str, timedelta]:
    """``{"success": ..., "error": ...}`` (either key optional, None for the setting's) as timedeltas;
    a key or value it cannot take is ``InvalidParams``."""
    if retention is None:
        return {}
    if not isinstance(retention, dict):
        raise InvalidParams(f"retention must be a dict with 'success' and/or 'error' durations, got "
                            f"{type(retention).__name__}")
    unknown = [key for key in retention if key not in RETENTION_OUTCOMES]
    if unknown:
        hints = [f" ({key!r} is Cloudflare's name for {_CLOUDFLARE_RETENTION_KEYS[key]!r})"
                 for key in unknown if key in _CLOUDFLARE_RETENTION_KEYS]
        raise InvalidParams("retention takes the keys 'success' and 'error', not "
                            f"{', '.join(map(repr, unknown))}{''.join(hints)}")
    return {outcome: parse_retention_duration(outcome, value) for outcome, value in retention.items()
            if value is not None}


def _check_params(instance_id: str, params) -> Any:
    """``params`` as the instance stores them (typed values in the journal's tagged form)."""
    try:
        return dump(params, workflow_settings.MAX_PARAMS_SIZE)[1]
    except NotJournalable as exc:
        refusal = ParamsTooLarge if exc.too_large else InvalidParams
        raise refusal(f"The params of instance {instance_id!r} {exc}", too_large=exc.too_large) from None


class WorkflowHandle:
    """One workflow, by name: create instances of it and look them up."""

    def __init__(self, name: str):
        self.workflow_class = registry.get(name)
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name}>"

    def _new_instance(self, instance_id, params, retention=None, subject=None, tags=None, priority=None,
                      queue=None) -> Instance:
        instance_id = str(uuid.uuid4()) if instance_id is None else validate_instance_id(instance_id)
        stored = _check_params(instance_id, params)
        kept = parse_retention(retention)
        subject_type, subject_id = (None, None) if subject is None else subjects.subject_of(subject)
        now = clock.now()
        placement = place(self.workflow_class, params, tags, now, priority=priority, queue=queue)
        return Instance(workflow_name=self.name, instance_id=instance_id, params=stored,
                        status=InstanceStatus.QUEUED, created_at=now, updated_at=now,
                        success_retention=kept.get("success"), error_retention=kept.get("error"),
                        version=WorkflowOptions.of(self.workflow_class).version,
                        subject_type=subject_type, subject_id=subject_id, **placement.fields())

    def create(self, id: str | None = None, params: Any = None,  # noqa: A002
               retention: dict | None = None, *, subject: Any = None,
               tags: dict[str, str] | None = None, priority: int | None = None,
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
        searched by, ``{"tenant": "acme"}`` (``django_workflows.tags``); ``step.set_tags`` adds more.
        A subject or tags it cannot take raise ``InvalidSubject`` / ``InvalidTags`` and create nothing.

        ``priority`` (0 to 9, higher first) and ``queue`` override the workflow class's
        (``django_workflows.routing``); a value out of range, or a queue the project does not have, raises
        ``InvalidParams``, as do params without the key of a keyed limit, and create nothing."""
        checked_tags = {key: value for key, value in validate_tags(tags, "create(tags=...)").items()
                        if value is not None}
        instance = self._new_instance(id, params, retention, subject, checked_tags, priority, queue)
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

    def create_batch(self, batch) -> list[InstanceHandle]:
        """Create up to 100 instances from ``[{"id": ..., "params": ..., "retention": ..., "subject": ...,
        "tags": ...}, ...]`` (each key optional; each as ``create()`` takes it).

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
            instance = self._new_instance(item.get("id"), item.get("params"), item.get("retention"),
                                          item.get("subject"), kept_tags, item.get("priority"), item.get("queue"))
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


class InstanceHandle:
    """One instance: read its status and steer it. Every change goes through a conditional update,
    so two callers racing cannot both win, and a refused change leaves the instance as it was."""

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
        ``{name, message}``, and, once a rollback ran, ``rollback`` as ``{outcome, error}`` (absent
        otherwise, as Cloudflare leaves it out)."""
        row = self._rows().values("status", "output", "error").first()
        if row is None:
            raise InstanceNotFound(f"Instance {self.workflow_name}/{self.id} no longer exists.",
                                   workflow=self.workflow_name, instance_id=self.id)
        # A large output read back from its file, then its typed values revived.
        row["output"] = read_back(row["output"], True, lambda: f"instance {self.workflow_name}/{self.id}, output")
        rollback = rollback_of(row["error"])
        return row if rollback is None else {**row, "rollback": rollback}

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
        (``django_workflows.sending``); a refusal stores nothing.
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
