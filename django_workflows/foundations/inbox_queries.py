"""What the event inbox is asked: its events not yet taken, by type and age, and those around a stretch of
the journal. ``Event.objects``; beside the models module, which holds the table itself."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Self

from django.db import models
from django.db.models import F, Q


class EventQuerySet(models.QuerySet):
    def unconsumed(self) -> Self:
        return self.filter(consumed_by__isnull=True)

    def inbox_of(self, instance: models.Model):  # the annotated queryset (consumed_key), as the ORM types it
        """Every event sent to an instance, consumed or not, each with the key of the step that consumed
        it (``consumed_key``; None while it waits)."""
        return self.filter(instance_id=instance.pk).annotate(consumed_key=F("consumed_by__key"))

    def buffered(self) -> Self:
        """The events no wait has consumed yet, oldest first: the order waits take them in."""
        return self.unconsumed().order_by("received_at", "id")

    def latest_consumed(self) -> Self:
        """The events a wait consumed, newest first."""
        return self.filter(consumed_by__isnull=False).order_by("-received_at", "-id")

    def around(self, steps: Iterable[models.Model], received_since: datetime | None = None,
               received_until: datetime | None = None) -> Self:
        """The events that belong with a stretch of the journal, oldest first: those its ``steps``
        consumed, and those received between ``received_since`` and ``received_until`` (an open end
        reaches the first or the last event; with both open, every event)."""
        received = {}
        if received_since is not None:
            received["received_at__gte"] = received_since
        if received_until is not None:
            received["received_at__lte"] = received_until
        events = self
        if received:
            events = self.filter(Q(consumed_by__in=[step.pk for step in steps]) | Q(**received))
        return events.order_by("received_at", "id")

    def waiting_for(self, instance_pk: int, types: Sequence[str]) -> Self:
        """Buffered events of ``types`` for an instance, oldest first."""
        return self.filter(instance_id=instance_pk, type__in=types, consumed_by__isnull=True).order_by(
            "received_at", "id"
        )
