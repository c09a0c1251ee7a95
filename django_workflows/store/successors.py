"""Continue-as-new in the store: the transaction that ends an instance and starts its successor.

The successor is inserted, given its predecessor's subject and tags, and the predecessor's lease released
as it ends (its ``successor`` set), in one transaction fenced by the replay's epoch as every ending is:
a terminate, restart or lease taken meanwhile rolls the whole of it back, successor included, and a
worker that dies before the commit leaves neither. The successor's first replay is enqueued within that
transaction for an executor that writes its task there, else once it commits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from django_workflows.foundations.control_flow import Fenced
from django_workflows.executors import enqueue
from django_workflows.models import Instance
from django_workflows.store import tags
from django_workflows.store.journal import Costs, JournalWriter
from django_workflows.store.journal_entries import engine_statements


def id_taken(workflow_name: str, instance_id: str) -> bool:
    """Whether the workflow has an instance with that id already (a successor's id is then taken)."""
    with engine_statements():
        return Instance.objects.for_workflow(workflow_name).filter(instance_id=instance_id).exists()


def continue_as_new(writer: JournalWriter, successor: Instance, now: datetime, costs: Costs | None,
                    **fields: Any) -> int:
    """End the instance of ``writer`` with ``fields`` and start ``successor`` (its predecessor set), in one
    transaction; return the successor's pk. ``Fenced`` if the epoch moved on: then neither happened."""
    predecessor = writer.instance_pk
    with engine_statements(), transaction.atomic(using=writer.alias):
        subject = Instance.objects.filter(pk=predecessor).values_list("subject_type_id", "subject_id").first()
        if subject is not None:
            successor.subject_type_id, successor.subject_id = subject
        successor.save(force_insert=True)
        kept = tags.of(predecessor)
        if kept:
            tags.write(successor.pk, kept)
        if not writer.release(now, costs, successor_id=successor.pk, **fields):
            raise Fenced()  # rolls the successor back with the rest
        enqueue(successor.pk)
    return successor.pk
