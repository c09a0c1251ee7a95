"""Steering many instances at once: pause, resume, terminate or restart those a filter selects.

One way for every surface (the API's ``instances/bulk/``, the command line's ``--where``, the admin's
actions on the selected rows): the instances are narrowed to those the user may steer
(``access.scope``), each is changed through its handle (whose conditional update, read from the
transitions table, decides), and each change is audited as its surface records it.

A filter is a mapping of names to values: ``{"status": "waiting", "id": ["a", "b"]}``; values of one
name are alternatives, names combine. Two changes take a variant, as the single instance's do: a
restart from a step (``from_step``, and ``count``: which step of that name), which selects only the
instances whose journal holds that step, and a terminate with rollback (``rollback``), which runs the
undos of each instance's steps first. Each name is looked up in ``FILTERS``, and a dotted name
(``tag.tenant``) by its first part: a feature that adds a way to find instances (tags, subjects) adds
its filter there with ``register_filter``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet

from django_workflows.shared import workflow_access as access
from django_workflows.errors import InvalidFilter, InvalidParams, WorkflowError
from django_workflows.client.instances import InstanceHandle
from django_workflows.models import Instance, InstanceStatus
from django_workflows.shared.transitions import RESTART, TERMINATE, TRANSITIONS, Transition
from django_workflows.foundations.validation import validate_existing_instance_id, validate_step_name

MAX_BATCH = 1000
"""The most instances one bulk request changes: a larger selection is steered in several requests."""
DEFAULT_BATCH = 100
logger = logging.getLogger("django_workflows.audit")

FilterBuilder = Callable[[str, list[str]], Q]
"""``(name, values) -> Q`` on ``Instance``; raises ``InvalidFilter`` for a value it cannot take."""


def _workflow(name: str, values: list[str]) -> Q:
    return Q(workflow_name__in=values)


def _status(name: str, values: list[str]) -> Q:
    unknown = [v for v in values if v not in InstanceStatus.values]
    if unknown:
        raise InvalidFilter(f"status {unknown[0][:100]!r} is not a status; use one of {', '.join(InstanceStatus.values)}.")
    return Q(status__in=values)


def _ids(name: str, values: list[str]) -> Q:
    for value in values:
        validate_existing_instance_id(value)
    return Q(instance_id__in=values)


FILTERS: dict[str, FilterBuilder] = {"workflow": _workflow, "status": _status, "id": _ids}


def register_filter(name: str, build: FilterBuilder) -> None:
    """Add a filter: ``name`` (``"subject"``), or a family of dotted names by its first part (``"tag"``
    takes ``tag.tenant``, ``tag.region``)."""
    FILTERS[name] = build


def where_filter(where: Mapping[str, Any]) -> Q:
    """The instances ``where`` selects, as a filter on ``Instance``; an empty ``where`` is refused, so
    that a missing filter never steers every instance."""
    if not isinstance(where, Mapping) or not where:
        raise InvalidFilter("Give at least one filter (where), such as {\"status\": \"waiting\"}; "
                            f"known filters: {', '.join(sorted(FILTERS))}.")
    selected = Q()
    for name, raw in where.items():
        build = FILTERS.get(str(name)) or FILTERS.get(str(name).partition(".")[0] if "." in str(name) else "")
        if build is None:
            raise InvalidFilter(f"Unknown filter {str(name)[:100]!r}; known filters: {', '.join(sorted(FILTERS))}.")
        values = raw if isinstance(raw, list) else [raw]
        if not values or not all(isinstance(v, str) and v for v in values):
            raise InvalidFilter(f"Filter {name!r} takes a non-empty string or a list of them, got {raw!r:.100}.")
        selected &= build(str(name), values)
    return selected


def parse_where_arguments(arguments: Iterable[str]) -> dict[str, list[str]]:
    """``["status=waiting", "id=a,b"]`` (the command line's ``--where``) as a filter mapping."""
    where: dict[str, list[str]] = {}
    for argument in arguments:
        name, equals, value = argument.partition("=")
        if not equals or not name.strip() or not value:
            raise InvalidFilter(f"--where takes NAME=VALUE (VALUE may list alternatives: id=a,b), got {argument!r}.")
        where.setdefault(name.strip(), []).extend(v for v in value.split(",") if v)
    return where


@dataclass(frozen=True)
class Change:
    """What a bulk change does to each instance: a transition's ``action``, with the variant of a restart
    (``from_step``, ``count``) or of a terminate (``rollback``); checked as it is made, before anything
    changes."""

    action: str
    from_step: str | None = None
    count: int = 1
    rollback: bool = False

    def __post_init__(self) -> None:
        transition_for(self.action)
        if self.from_step is not None:
            if self.action != RESTART.action:
                raise InvalidParams(f"from_step belongs to restart, not {self.action}: leave it out, or "
                                    "restart.")
            validate_step_name(self.from_step)
            if not self.from_step.isascii():
                try:
                    self.from_step.encode("utf-8")
                except UnicodeEncodeError:
                    # Half of a UTF-16 pair ("\ud800") is no step's name, and the database cannot take it.
                    raise InvalidParams(f"from_step {self.from_step!r:.100} is not text: no step has that "
                                        "name.") from None
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidParams(f"count must be a whole number from 1 (the first step of that name), got "
                                f"{self.count!r:.100}.")
        if self.count != 1 and self.from_step is None:
            raise InvalidParams("count says which step named from_step to restart from: give from_step too.")
        if self.rollback and self.action != TERMINATE.action:
            raise InvalidParams(f"rollback belongs to terminate, not {self.action}: leave it out, or "
                                "terminate.")

    @property
    def from_key(self) -> str | None:
        """The journal key of the step a restart runs again from."""
        return None if self.from_step is None else f"{self.from_step}-{self.count}"

    @property
    def past(self) -> str:
        """What the audit and the surfaces say was done: "restarted from step 'charge' #1"."""
        if self.from_step is not None:
            return f"{RESTART.past} from step {self.from_step!r} #{self.count}"
        if self.rollback:
            return "queued to roll back, then terminate"
        return TRANSITIONS[self.action].past

    def apply(self, handle: InstanceHandle) -> None:
        if self.from_step is not None:
            handle.restart(from_step=self.from_step, count=self.count)
        elif self.rollback:
            handle.terminate(rollback=True)
        else:
            getattr(handle, self.action)()

    def variant(self) -> dict[str, Any]:
        """The variant as the audit record and the API's answer give it (empty for a plain change); the
        step's count as ``from_step_count``, where ``count`` is how many instances changed."""
        if self.from_step is not None:
            return {"from_step": self.from_step, "from_step_count": self.count}
        return {"rollback": True} if self.rollback else {}


def as_change(action: str | Change) -> Change:
    return action if isinstance(action, Change) else Change(action)


@dataclass
class BulkOutcome:
    """What a bulk change did (or, dry run, would do): the instances changed, and those it could not."""

    action: str
    dry_run: bool
    change: Change
    changed: list[Instance] = field(default_factory=list)
    refused: list[tuple[Instance, str]] = field(default_factory=list)
    more: bool = False
    """Whether more instances matched than the batch took: steer again for the rest."""

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, **self.change.variant(), "dry_run": self.dry_run,
                "count": len(self.changed),
                "ids": [row.instance_id for row in self.changed],
                "refused": [{"id": row.instance_id, "message": message} for row, message in self.refused],
                "more": self.more}


def select(action: str | Change, instances: QuerySet[Instance], user: Any) -> QuerySet[Instance]:
    """The instances of ``instances`` that ``action`` applies to (the transitions table; for a restart
    from a step, those whose journal holds it) and ``user`` may steer, oldest first, so that repeated
    batches move through them in a stable order."""
    change = as_change(action)
    transition = transition_for(change.action)
    selected = access.scope(instances, user, access.STEER).filter(status__in=transition.applies_to)
    if change.from_key is not None:
        selected = selected.filter(steps__key=change.from_key)
    return selected.only("pk", "instance_id", "workflow_name").order_by("pk")


def transition_for(action: str) -> Transition:
    if action not in TRANSITIONS:
        raise InvalidFilter(f"Unknown action {str(action)[:100]!r}; use one of {', '.join(TRANSITIONS)}.")
    return TRANSITIONS[action]


def steer(action: str | Change, instances: Iterable[Instance], *, dry_run: bool = False,
          limit: int | None = None, who: str = "",
          done: Callable[[Instance], object] | None = None) -> BulkOutcome:
    """Apply ``action`` (an action's name, or a ``Change`` with its variant) to each of ``instances``
    (already narrowed by ``select``, or the admin's selection) through its handle, up to ``limit``;
    ``done`` is called for each change (the admin's log entry) and each is logged to
    ``django_workflows.shared.audit`` as done by ``who`` ("api:alice")."""
    change = as_change(action)
    rows = list(instances if limit is None else instances[: limit + 1])  # type: ignore[index]
    outcome = BulkOutcome(change.action, dry_run, change, more=limit is not None and len(rows) > limit)
    for row in rows[:limit]:
        if dry_run:
            outcome.changed.append(row)
            continue
        try:
            change.apply(InstanceHandle.from_row(row.workflow_name, row.instance_id, row.pk))
        except WorkflowError as exc:
            # Changed meanwhile (InvalidTransition), gone, or without the step to restart from (the
            # admin's selection): the others go on.
            outcome.refused.append((row, str(exc)))
        else:
            outcome.changed.append(row)
            logger.info("%s %s by %s", change.past.capitalize(), row, who or "(Python code)",
                        extra={"action": change.action, **change.variant(), "instance": str(row), "by": who})
            if done is not None:
                done(row)
    return outcome
