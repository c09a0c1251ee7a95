"""A new instance's row, built from what ``create()`` (or ``create_batch``) is given and what its workflow
class declares: its params in the journal's form, its retention, subject, deadline, queue, priority,
turn and limit key. Built here once, so that every way of creating an instance gives it the same."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from django_workflows.shared import clock, deadlines
from django_workflows.foundations import subjects
from django_workflows.foundations.conf import workflow_settings
from django_workflows.errors import InvalidParams, ParamsTooLarge
from django_workflows.shared.instance_retention import parse_retention
from django_workflows.models import Instance, InstanceStatus
from django_workflows.shared.options import WorkflowOptions, place
from django_workflows.shared.serialization import NotJournalable, dump
from django_workflows.foundations.validation import validate_instance_id


def check_params(instance_id: str, params: Any) -> Any:
    """``params`` as the instance stores them (typed values in the journal's tagged form)."""
    try:
        return dump(params, workflow_settings.MAX_PARAMS_SIZE)[1]
    except NotJournalable as exc:
        refusal = ParamsTooLarge if exc.too_large else InvalidParams
        raise refusal(f"The params of instance {instance_id!r} {exc}", too_large=exc.too_large) from None


def new_instance(workflow_class: type, name: str, instance_id: str | None, params: Any, retention: Any = None,
                 subject: Any = None, timeout: Any = None, tags: dict[str, str] | None = None,
                 priority: Any = None, queue: Any = None) -> Instance:
    """The unsaved row of a new, queued instance; what it cannot take raises ``InvalidParams`` (or one
    of its kinds), before anything is written."""
    instance_id = str(uuid.uuid4()) if instance_id is None else validate_instance_id(instance_id)
    stored = check_params(instance_id, params)
    kept = parse_retention(retention)
    subject_type, subject_id = (None, None) if subject is None else subjects.subject_of(subject)
    options = WorkflowOptions.of(workflow_class)
    own_timeout = options.timeout if timeout is None else deadlines.parse_timeout(timeout, "timeout")
    now = clock.now()
    placement = place(workflow_class, params, tags, now, priority=priority, queue=queue)
    row = unsaved(workflow_name=name, instance_id=instance_id, params=stored,
                  status=InstanceStatus.QUEUED, created_at=now, updated_at=now,
                  success_retention=kept.get("success"), error_retention=kept.get("error"),
                  version=options.version, subject_id=subject_id, timeout=own_timeout,
                  deadline=deadlines.deadline_after(now, own_timeout), **placement.fields())
    if subject_type is not None:
        row.subject_type = subject_type
    return row


def unsaved(**values: Any) -> Instance:
    """An unsaved ``Instance`` of ``values`` (by attribute name: ``subject_type_id``), every other field
    at its default: what ``Instance(**values)`` builds, without ``Model.__init__``'s work for each of the
    model's fields at every call (a tenth of an inline create()'s Python on SQLite). What the defaults
    are is read once per process; where a receiver of ``pre_init`` or ``post_init`` listens for Instance,
    it is ``Instance(**values)``, so that the receiver runs."""
    if pre_init.has_listeners(Instance) or post_init.has_listeners(Instance):
        return Instance(**values)
    global _defaults
    if _defaults is None:
        _defaults = _Defaults()
    if not values.keys() <= _defaults.fixed.keys():
        raise TypeError(f"Instance has no fields {sorted(values.keys() - _defaults.fixed.keys())}")
    row = Instance.__new__(Instance)
    state = row.__dict__
    state.update(_defaults.fixed)
    for name, make in _defaults.made:
        state[name] = make()
    state.update(values)
    state["_state"] = ModelState()
    return row


class _Defaults:
    """Instance's defaults by attribute name: the values, and the callables (a default made anew for each
    row) made at each row."""

    def __init__(self) -> None:
        fields = Instance._meta.concrete_fields
        self.fixed: dict[str, Any] = {field.attname: field.get_default() for field in fields}
        self.made = [(field.attname, field.default) for field in fields
                     if field.has_default() and callable(field.default)]


_defaults: _Defaults | None = None


def starting_at(instance: Instance, start: datetime | None) -> None:
    """Make ``instance`` start at ``start`` (``create(start_at=...)``), scheduled until then; None: at once.
    Its deadline and its turn count from its start: the time before it is not the instance's to use."""
    if start is None:
        return
    instance.wake_at = start
    instance.status = InstanceStatus.SCHEDULED
    instance.deadline = deadlines.deadline_after(start, instance.timeout)
    assert instance.turn_at is not None  # placed when the row was built
    instance.turn_at = instance.turn_at + (start - instance.created_at)
