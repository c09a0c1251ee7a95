"""The queries on instances: ``Instance.objects``'s intent-named methods (``due()``, ``expired_leases()``,
``tagged()``...) and the tag filter an ``INSTANCE_ACCESS`` rule composes. ``django_workflows.models``
re-exports both, where projects import them from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Self

from django.db import connections, models
from django.db.models import Q

from django_workflows.foundations import subjects
from django_workflows.foundations.side_tables import InstanceTag
from django_workflows.foundations.statuses import InstanceStatus


class InstanceQuerySet(models.QuerySet):
    def for_workflow(self, name: str) -> Self:
        return self.filter(workflow_name=name)

    def for_steering(self) -> Self:
        """Only what names each instance (its pk, workflow and id): enough to steer it by its handle."""
        return self.only("pk", "instance_id", "workflow_name")

    def due(self, now: datetime) -> Self:
        """Waiting instances whose wake time has come."""
        return self.filter(status=InstanceStatus.WAITING, wake_at__lte=now)

    def debounced(self, workflow_name: str, key: str) -> Self:
        """The scheduled instance that triggers of ``create(debounce={"key": key, ...})`` join (at most one)."""
        return self.filter(workflow_name=workflow_name, debounce_key=key, status=InstanceStatus.SCHEDULED)

    def expired_leases(self, now: datetime) -> Self:
        return self.filter(
            status__in=(InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE), lease_expires_at__lt=now
        )

    def stale_queued(self, before: datetime) -> Self:
        """Queued instances untouched since ``before``: their replay task may have been lost."""
        return self.filter(status=InstanceStatus.QUEUED, updated_at__lt=before)

    def waiting_for_any(self, types_by_workflow: Mapping[str, Iterable[str]]) -> Self:
        """Instances waiting for an event of a type listed for their workflow in ``types_by_workflow``
        (``{workflow name: event types}``). A wait may name several types; one listed is enough."""
        listed = Q(pk__in=[])
        for workflow_name, types in types_by_workflow.items():
            if types:
                listed |= Q(workflow_name=workflow_name, waiting_for__holds_any_of=sorted(types))
        return self.filter(listed, status=InstanceStatus.WAITING)

    def id_starts_with(self, prefix: str) -> Self:
        """The instances whose id begins with ``prefix``, as typed (ids are case-sensitive), read as a range
        of the ``dw_instance_unique_by_id`` index, which the id leads. On PostgreSQL a ``LIKE`` prefix is
        that range (the index's pattern operator class). SQLite's ``LIKE`` ignores case and, written with
        Django's ``ESCAPE``, scans the whole index: there the prefix is the range itself, from the prefix
        up to the prefix with its last character the next one (SQLite orders text by its bytes)."""
        if not prefix or connections[self.db].vendor != "sqlite":
            return self.filter(instance_id__startswith=prefix)
        if not prefix.isascii():
            # Ids are ASCII: none begins so. An empty range, which still compiles (the admin's bounded
            # counts write the query's SQL).
            return self.filter(instance_id__gte=prefix, instance_id__lt=prefix)
        return self.filter(instance_id__gte=prefix, instance_id__lt=prefix[:-1] + chr(ord(prefix[-1]) + 1))

    def for_subject(self, subject) -> Self:
        """The instances bound to ``subject`` (``create(subject=order)``): a model instance, or its
        reference ``"app_label.model:pk"``."""
        content_type, pk = subjects.find(subject)
        return self.filter(subject_type=content_type, subject_id=pk)

    def tagged(self, tags) -> Self:
        """The instances that hold every tag of ``tags`` (``{"tenant": "acme"}``)."""
        return self.filter(with_tags(tags))


def with_tags(tags) -> Q:
    """The instances holding every tag of ``tags``, as a filter on ``Instance``: for ``tagged()``, and
    for an ``INSTANCE_ACCESS`` rule (``with_tags({"tenant": user.profile.tenant})``). A subquery per tag
    rather than a join, so that it never repeats an instance, combined with ``|`` or ``&`` as any Q."""
    from django_workflows.foundations.tag_rules import validate_tags

    condition = Q()
    for key, value in validate_tags(tags, "tag filter").items():
        condition &= Q(pk__in=InstanceTag.objects.filter(key=key, value=value).values("instance_id"))
    return condition
