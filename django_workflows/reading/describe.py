"""Instances and workflows as plain data, shaped like Cloudflare's REST API, for the API, the CLI and the
admin.

The values are typed: a moment is a ``datetime`` as the database gives it (aware, with USE_TZ; ``None``
when it has not come), a duration a ``timedelta``, not text. Each surface writes them its own way: the
API's serializers and the CLI's ``--json`` as ISO 8601 (``datetime.isoformat()``) and milliseconds, the
CLI's tables and the admin's timeline as people read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db.models import Q

from django_workflows import signals
from django_workflows.shared import clock, counts
from django_workflows.foundations import subjects
from django_workflows.shared.workflow_access import EVERYTHING
from django_workflows.shared.definition import registry
from django_workflows.shared.error_journal import rollback_of
from django_workflows.models import MARKER_KINDS, Event, Instance, InstanceStatus, Step, StepKind
from django_workflows.shared.options import WorkflowOptions
from django_workflows.store import leases, listing
from django_workflows.store import progress as instance_progress
from django_workflows.store import tags as instance_tags


def status_counts(workflow_name: str | None = None, within: Q = EVERYTHING) -> dict[str, dict[str, int]]:
    """``{workflow name: {status: count}}`` with every status present, for every workflow defined or with
    instances stored (or for one): each count exact up to ``counts.EXACT_UP_TO``, PostgreSQL's estimate
    above it (``workflow_status_totals`` says which)."""
    return as_numbers(workflow_status_totals(workflow_name, within))


def as_numbers(totals: dict[str, dict[str, counts.Count]]) -> dict[str, dict[str, int]]:
    """``workflow_status_totals`` as plain numbers (JSON), estimated or not."""
    return {name: {status: count.value for status, count in by_status.items()} for name, by_status in totals.items()}


def workflow_status_totals(workflow_name: str | None = None,
                           within: Q = EVERYTHING) -> dict[str, dict[str, counts.Count]]:
    """``status_counts`` with each count a ``counts.Count``, which says whether it is estimated. Two
    statements whatever the number of workflows: a bounded count per workflow and status, each read
    from the index by workflow, status and age, and their estimates. ``within`` counts only the
    instances it matches (``access.instances_filter``: those a user may see)."""
    stored = set(listing.workflow_names())
    names = [workflow_name] if workflow_name is not None else sorted(set(registry.names()) | stored)
    # A workflow without instances stored is all zeros, with nothing to count.
    pairs = [(name, status) for name in names if name in stored for status in InstanceStatus.values]
    # In the order of dw_instance_by_age (workflow, status, creation time): read from the index alone.
    found = counts.count_each([Instance.objects.filter(within, workflow_name=name, status=status)
                               for name, status in pairs],
                              order_by=("created_at",))
    totals = {name: dict.fromkeys(InstanceStatus.values, counts.Count(0)) for name in names}
    for (name, status), count in zip(pairs, found, strict=True):
        totals[name][status] = count
    return totals


def status_totals(workflow_name: str | None = None, within: Q = EVERYTHING) -> dict[str, counts.Count]:
    """How many instances (of one workflow, or of every one) are in each status, every status present:
    exact up to ``counts.EXACT_UP_TO``, estimated above it (two statements: the bounded counts, each
    read from an index that leads with the status, or with the workflow and the status; and the
    planner's estimates)."""
    if workflow_name is None:
        # In the order of dw_instance_status_updated (status, last change): read from the index alone.
        rows, order = Instance.objects.all(), ("updated_at",)
    else:
        rows, order = Instance.objects.for_workflow(workflow_name), ("created_at",)  # dw_instance_by_age
    totals = counts.count_each([rows.filter(within, status=status) for status in InstanceStatus.values],
                               order_by=order)
    return dict(zip(InstanceStatus.values, totals, strict=True))


def describe_workflow(name: str, within: Q = EVERYTHING) -> dict:
    """The workflow's options as its replays apply them, and its instances by status.

    ``step_limit`` is the limit its replays enforce (the class's, else the ``STEP_LIMIT`` setting;
    ``step_limit_from_setting`` says which); ``cpu_time_limit_ms`` is the class's own (None: the
    ``CPU_TIME_LIMIT`` setting, or one that check E019 refuses)."""
    cls = registry.get(name)
    options = WorkflowOptions.of(cls)
    return {
        "name": name,
        "class_name": f"{cls.__module__}.{cls.__qualname__}",
        "description": (cls.__doc__ or "").strip(),
        "step_limit": options.step_limit,
        "step_limit_from_setting": options.own_step_limit is None,
        "cpu_time_limit_ms": (None if options.own_cpu_time_limit is None
                              else options.own_cpu_time_limit / timedelta(milliseconds=1)),
        "instances": status_counts(name, within)[name],
        "events": _declared_events(options),
        "limits": describe_limits(cls),
        "schedules": _schedules(name),
    }


def _schedules(name: str) -> list[dict]:
    """The workflow's cron schedules as ``workflows schedules`` lists them, with their next three slots.
    Without croniter they are listed all the same, each with the error that says what to install."""
    from django_workflows.errors import MissingExtra

    try:
        described = describe_schedules(clock.now(), 3, name)
    except MissingExtra as exc:
        options = WorkflowOptions.of(registry.get(name))
        described = [{"cron": expression, "timezone": options.schedule_timezone,
                      "catch_up": options.schedule_catch_up, "id_prefix": None, "next": [],
                      "stored_next_slot": None, "last_slot": None, "error": str(exc)}
                     for expression in options.schedule_expressions]
    for entry in described:
        entry.pop("workflow", None)
    return described


def describe_limits(cls) -> dict | None:
    """The workflow's concurrency and rate limits and where it stands against them, or None when it
    declares none. ``running`` counts the instances holding a slot (a live lease: a replay running, or
    one finishing its step before a pause); ``queued``, those waiting for a replay (for a slot, when at
    the limit); ``recent_starts``, the first replays within the rate limit's window. Values that checks
    E026/E027 refuse count as not declared."""
    own = WorkflowOptions.of(cls).limits
    if own is None:
        return None
    now = clock.now()
    counts = leases.slot_counts(cls.name, now)
    recent = None
    if own.rate is not None:
        recent = Instance.objects.filter(workflow_name=cls.name, started_at__gt=now - own.rate.period).count()
    return {
        "concurrency": own.concurrency,
        "rate_limit": str(own.rate) if own.rate is not None else None,
        "running": counts["running"],
        "queued": counts["queued"],
        "recent_starts": recent,
    }


def _declared_events(options: WorkflowOptions) -> list[dict] | None:
    rules = options.events
    if rules is None:
        return None
    return [{"type": rule.type, "permission": rule.permission, "webhook": rule.webhook, "approval": rule.approval,
             "schema": rule.schema} for rule in sorted(rules.values(), key=lambda rule: rule.type)]


def instance_summary(instance: Instance) -> dict:
    return {
        "id": instance.instance_id,
        "workflow": instance.workflow_name,
        "status": instance.status,
        "version": instance.version,
        "queued": instance.created_at,
        "start": instance.started_at,
        "end": instance.ended_at,
        "modified": instance.updated_at,
        "wake_at": instance.wake_at,
        "current_step": instance.current_step,
        "waiting_reason": instance.waiting_reason,
        # The content type comes from Django's cache of them: no query per instance of a list.
        "subject": subjects.reference(instance.subject_type_id, instance.subject_id),
        "queue": instance.queue,
        "priority": instance.priority,
    }


# What the API, the CLI and the admin show for the result of a step whose config says
# ``"sensitive": "output"`` (as the engine's signals and log records do).
REDACTED = signals.REDACTED


def describe_step(step: Step) -> dict:
    data = {
        "name": step.name,
        "key": step.key,
        "type": step.kind,
        "status": step.status,
        "start": step.started_at,
        "end": step.ended_at,
        "config": step.config,
        "success": {"succeeded": True, "failed": False}.get(step.status),
        "output": REDACTED if step.is_sensitive and step.result is not None else step.result,
        "error": step.error and {"name": step.error.get("name"), "message": step.error.get("message")},
    }
    if step.kind in MARKER_KINDS:
        # A marker, not a step: run() took the code a step.patched(change id) guards from here on, or
        # set the tags of step.set_tags (its output) here.
        data["after_steps"] = step.result.get("after_steps") if isinstance(step.result, dict) else None
    if step.kind == StepKind.DO:
        data["attempts"] = [_attempt(attempt) for attempt in step.attempts]
        # The sum over its attempts; None for a step journaled before attempts were measured.
        data["cpu_ms"] = _total(step.attempts, "cpu_ms")
        data["wall_ms"] = _total(step.attempts, "wall_ms")
    if step.kind in (StepKind.SLEEP, StepKind.WAIT):
        data["until" if step.kind == StepKind.SLEEP else "deadline"] = step.wake_at
    if step.kind == StepKind.DO and step.status == "retrying":
        data["next_attempt"] = step.wake_at
    return data


_ATTEMPT_TIMES = ("start", "end")


def _total(attempts: list[dict], key: str) -> float | None:
    measured = [attempt[key] for attempt in attempts if isinstance(attempt.get(key), (int, float))]
    return round(sum(measured), 3) if measured else None


def _attempt(stored: dict) -> dict:
    """A journaled attempt of a ``step.do``, its start and end (ISO text in the JSON column) as datetimes."""
    return {key: datetime.fromisoformat(value) if key in _ATTEMPT_TIMES and isinstance(value, str) else value
            for key, value in stored.items()}


def describe_event(event: Event, consumed_by_key: str | None) -> dict:
    return {
        "type": event.type,
        "payload": event.payload,
        "received": event.received_at,
        "sender": event.sender,
        "consumed_by": consumed_by_key,
        "consumed": event.consumed_at,
    }


def describe_retention(instance: Instance) -> dict | None:
    """The instance's own retention, chosen at create: ``{success, error, purge_at}``, the durations as
    ``timedelta`` (None for an outcome that follows ``RETENTION_DAYS``) and, once it has ended with one
    of them, when it is deleted; None if it chose none."""
    if instance.success_retention is None and instance.error_retention is None:
        return None
    return {"success": instance.success_retention, "error": instance.error_retention,
            "purge_at": instance.purge_at}


def describe_progress(instance_pk: int) -> dict | None:
    """The latest ``step.progress`` of the instance, ``{value, at}`` (the value as journaled), or None."""
    latest = instance_progress.latest(instance_pk)
    return None if latest is None else {"value": latest.value, "at": latest.at}


DETAIL_PAGE_SIZE = 100
CHILDREN_SHOWN = 100


def describe_parent(instance: Instance) -> dict | None:
    """The instance that started this one with ``step.child``: ``{workflow, id, step, on_parent_end}``
    (``workflow`` and ``id`` None if retention deleted it); None for an instance that is no child."""
    if instance.parent_id is None:
        return None
    row: Mapping[str, object] = (
        Instance.objects.filter(pk=instance.parent_id).values("workflow_name", "instance_id").first() or {})
    return {"workflow": row.get("workflow_name"), "id": row.get("instance_id"), "pk": instance.parent_id,
            "step": instance.parent_step, "on_parent_end": instance.on_parent_end}


def describe_family(instance: Instance) -> dict[str, str | None]:
    """The ids of the instances before and after it in its family (``step.continue_as_new``), None at either
    end: ``{predecessor, successor}``, in one query, and none for an instance that has neither. A member
    that retention deleted has its id kept as None too."""
    linked = {pk for pk in (instance.predecessor_id, instance.successor_id) if pk is not None}
    ids: dict[int | None, str] = (dict(Instance.objects.filter(pk__in=linked).values_list("pk", "instance_id"))
                                  if linked else {})
    return {"predecessor": ids.get(instance.predecessor_id), "successor": ids.get(instance.successor_id)}


def describe_children(instance: Instance, limit: int = CHILDREN_SHOWN) -> list[dict]:
    """The instances this one started with ``step.child``, oldest first (the first ``limit``)."""
    rows = (Instance.objects.filter(parent_id=instance.pk).order_by("created_at", "id")
            .values("pk", "workflow_name", "instance_id", "status", "parent_step", "on_parent_end")[:limit])
    return [{"workflow": row["workflow_name"], "id": row["instance_id"], "pk": row["pk"], "status": row["status"],
             "step": row["parent_step"], "on_parent_end": row["on_parent_end"]} for row in rows]


def describe_instance(instance: Instance, steps_page: int = 1, events_page: int = 1,
                      per_page: int = DETAIL_PAGE_SIZE) -> dict:
    """Everything about one instance: status, params, output, error, and a page of its steps and of its
    inbox (``per_page`` each), its tags and its latest progress (7 queries): an instance may hold 25,000 steps and
    1,000 unconsumed events."""
    step_rows = Step.objects.filter(instance_id=instance.pk)
    event_rows = Event.objects.filter(instance_id=instance.pk)
    counts = {"steps": step_rows.count(), "events": event_rows.count()}
    steps = list(step_rows.order_by("id")[(steps_page - 1) * per_page:steps_page * per_page])
    events = list(event_rows.order_by("received_at", "id")[(events_page - 1) * per_page:events_page * per_page])
    keys: dict[int | None, str] = {step.pk: step.key for step in steps}
    missing = {event.consumed_by_id for event in events if event.consumed_by_id and event.consumed_by_id not in keys}
    if missing:
        keys.update(Step.objects.filter(pk__in=missing).values_list("pk", "key"))
    return {
        **instance_summary(instance),
        "tags": instance_tags.of(instance.pk),
        "params": instance.params,
        "output": instance.output,
        "error": instance.error,
        "rollback": rollback_of(instance.error),
        "retention": describe_retention(instance),
        "progress": describe_progress(instance.pk),
        "parent": describe_parent(instance),
        "children": describe_children(instance),
        "timeout": instance.timeout,
        "deadline": instance.deadline,
        **describe_family(instance),
        # What its replays have cost so far (each adds its own as it ends), over the instance's life.
        "cpu_ms": round(instance.cpu_ms, 3),
        "step_wall_ms": round(instance.step_wall_ms, 3),
        "steps": [describe_step(step) for step in steps],
        "events": [describe_event(event, keys.get(event.consumed_by_id)) for event in events],
        "pages": {
            "per_page": per_page,
            **{name: {"page": page, "pages": max(1, -(-counts[name] // per_page)), "count": counts[name]}
               for name, page in (("steps", steps_page), ("events", events_page))},
        },
    }


def describe_schedules(now: datetime, count: int = 3, workflow_name: str | None = None) -> list[dict]:
    """Every cron schedule of the registered workflows (or of one), with its next ``count`` slots after
    ``now`` and where the workers stand with it (``None`` until a worker has seen it). A schedule the
    system check refuses is listed with its ``error`` and no slots; croniter missing raises
    ``MissingExtra``."""
    from django_workflows.shared import cron
    from django_workflows.models import Schedule

    classes = [registry.get(workflow_name)] if workflow_name is not None else registry.all()
    scheduled = sorted((options for options in map(WorkflowOptions.of, classes)
                        if options.schedule_expressions),
                       key=lambda options: options.name)
    if scheduled:
        cron.require_croniter("Listing schedules")
    stored = Schedule.objects.filter(workflow_name__in=[options.name for options in scheduled])
    rows = {(row["workflow_name"], row["key"]): row
            for row in stored.values("workflow_name", "key", "next_slot", "last_slot")}
    described = []
    for options in scheduled:
        timezone, catch_up = options.schedule_timezone, options.schedule_catch_up
        for expression in options.schedule_expressions:
            entry = {"workflow": options.name, "cron": expression, "timezone": timezone, "catch_up": catch_up,
                     "id_prefix": None, "next": [], "stored_next_slot": None, "last_slot": None,
                     "error": None}
            try:
                if catch_up not in cron.CATCH_UP_POLICIES:
                    raise cron.InvalidSchedule(f"schedule_catch_up {catch_up!r} is not one of "
                                               f"{', '.join(cron.CATCH_UP_POLICIES)}")
                schedule = cron.CronSchedule(expression, timezone)
            except cron.InvalidSchedule as exc:
                entry["error"] = str(exc)
                described.append(entry)
                continue
            row = rows.get((options.name, schedule.key))
            entry.update(cron=schedule.expression, id_prefix=f"{cron.ID_PREFIX}{schedule.key}-",
                         next=schedule.upcoming(now, count),
                         stored_next_slot=row["next_slot"] if row else None,
                         last_slot=row["last_slot"] if row else None)
            described.append(entry)
    return described
