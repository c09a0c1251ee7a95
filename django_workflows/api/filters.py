"""The list filters of the API beyond status and version: the row instances are about, and their tags."""

from __future__ import annotations

from django_workflows.models import Instance, InstanceQuerySet


def by_subject_and_tags(rows: InstanceQuerySet[Instance], query) -> InstanceQuerySet[Instance]:
    """``rows`` narrowed by ``?subject=app.model:pk`` and each ``?tag.<key>=value``; a reference or a tag
    it cannot read is a 400 that says the form (``InvalidSubject``, ``InvalidTags``)."""
    subject = query.get("subject")
    if subject is not None:
        rows = rows.for_subject(subject)
    tags = {name.removeprefix("tag."): value for name, value in query.items() if name.startswith("tag.")}
    return rows.tagged(tags) if tags else rows
