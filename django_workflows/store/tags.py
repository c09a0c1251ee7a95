"""The statements on an instance's tags: set some (a value each, or None to remove one)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import router

from django_workflows.models import InstanceTag


def write(instance_pk: int, tags: Mapping[str, str | None]) -> None:
    """Set ``tags`` on the instance: a value replaces the key's value, None removes the key; keys not
    named are left as they are. Two statements at most, whatever the number of tags; run in the
    caller's transaction (an instance's insert, or a replay's marker)."""
    alias = router.db_for_write(InstanceTag)
    removed = [key for key, value in tags.items() if value is None]
    if removed:
        InstanceTag.objects.using(alias).filter(instance_id=instance_pk, key__in=removed).delete()
    kept = [InstanceTag(instance_id=instance_pk, key=key, value=value)
            for key, value in tags.items() if value is not None]
    if kept:
        InstanceTag.objects.using(alias).bulk_create(kept, update_conflicts=True, unique_fields=["instance", "key"],
                                                     update_fields=["value"])


def of(instance_pk: int) -> dict[str, str]:
    """The instance's tags, by key."""
    return dict(InstanceTag.objects.filter(instance_id=instance_pk).order_by("key").values_list("key", "value"))
