"""The statements on an instance's tags: set some (a value each, or None to remove one)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import connections, router

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


def write_new(tags: Mapping[int, Mapping[str, str]]) -> None:
    """The tags of instances just inserted, by primary key: one INSERT for the lot (``create_batch``). A
    conflict is skipped: an id a concurrent batch inserted first keeps its own tags."""
    rows = [InstanceTag(instance_id=pk, key=key, value=value) for pk, pairs in tags.items()
            for key, value in pairs.items()]
    if rows:
        InstanceTag.objects.using(router.db_for_write(InstanceTag)).bulk_create(rows, ignore_conflicts=True)


def of(instance_pk: int) -> dict[str, str]:
    """The instance's tags, by key."""
    return dict(InstanceTag.objects.filter(instance_id=instance_pk).order_by("key").values_list("key", "value"))


# The (key, value) pairs in index order, the next one past the last found at each step: one probe of
# dw_tag_lookup per pair, however many instances hold each (SELECT DISTINCT would read them all).
_PAIRS = """
    WITH RECURSIVE pairs (tag_key, tag_value, n) AS (
        SELECT tag_key, tag_value, 1 FROM (
            SELECT {key} AS tag_key, value AS tag_value FROM {table} ORDER BY {key}, value LIMIT 1) AS first
        UNION ALL
        SELECT
            (SELECT {key} FROM {table} WHERE ({key}, value) > (pairs.tag_key, pairs.tag_value)
             ORDER BY {key}, value LIMIT 1),
            (SELECT value FROM {table} WHERE ({key}, value) > (pairs.tag_key, pairs.tag_value)
             ORDER BY {key}, value LIMIT 1),
            n + 1
        FROM pairs WHERE pairs.tag_key IS NOT NULL AND n < %s
    )
    SELECT tag_key, tag_value FROM pairs WHERE tag_key IS NOT NULL
"""


def pairs(limit: int) -> list[tuple[str, str]]:
    """The first ``limit`` distinct (key, value) pairs of every instance's tags, in order: what the
    admin's tag filter offers."""
    connection = connections[router.db_for_read(InstanceTag)]
    quote = connection.ops.quote_name
    sql = _PAIRS.format(table=quote(InstanceTag._meta.db_table), key=quote("key"))
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [(key, value) for key, value in cursor.fetchall()]
