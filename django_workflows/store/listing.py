"""The distinct values the admin's filters offer, read without reading every instance.

``SELECT DISTINCT workflow_name`` reads the whole table (or a whole index) to find a handful of names;
neither PostgreSQL before 18 nor SQLite skips from one value to the next on its own. These statements
do it by hand, as a recursive query that asks the index for the smallest value past the last one
found: one index probe per distinct value, whatever the number of instances (a loose index scan, over
``dw_instance_by_age`` for the names and ``dw_instance_version`` for the versions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, router

from django_workflows.models import Instance


def _rows(sql: str, params: Sequence[str]) -> list[tuple[Any, ...]]:
    connection = connections[router.db_for_read(Instance)]
    table = connection.ops.quote_name(Instance._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=table), params)
        fetched: list[tuple[Any, ...]] = cursor.fetchall()
        return fetched


_WORKFLOW_NAMES = """
    WITH RECURSIVE names (name) AS (
        SELECT MIN(workflow_name) FROM {table}
        UNION ALL
        SELECT (SELECT MIN(workflow_name) FROM {table} WHERE workflow_name > names.name)
        FROM names WHERE names.name IS NOT NULL
    )
    SELECT name FROM names WHERE name IS NOT NULL
"""

_VERSIONS_OF = """
    WITH RECURSIVE versions (version) AS (
        SELECT MIN(version) FROM {table} WHERE workflow_name = %s
        UNION ALL
        SELECT (SELECT MIN(version) FROM {table} WHERE workflow_name = %s AND version > versions.version)
        FROM versions WHERE versions.version IS NOT NULL
    )
    SELECT version FROM versions WHERE version IS NOT NULL
"""

# Every (workflow, version) pair in index order: the next version of the same workflow if it has one,
# else the first version of the next workflow.
_VERSIONS = """
    WITH RECURSIVE pairs (name, version) AS (
        SELECT first.name, (SELECT MIN(version) FROM {table} WHERE workflow_name = first.name)
        FROM (SELECT MIN(workflow_name) AS name FROM {table}) AS first
        UNION ALL
        SELECT
            CASE WHEN (SELECT MIN(version) FROM {table}
                       WHERE workflow_name = pairs.name AND version > pairs.version) IS NULL
                 THEN (SELECT MIN(workflow_name) FROM {table} WHERE workflow_name > pairs.name)
                 ELSE pairs.name END,
            COALESCE(
                (SELECT MIN(version) FROM {table} WHERE workflow_name = pairs.name AND version > pairs.version),
                (SELECT MIN(version) FROM {table} WHERE workflow_name = (
                    SELECT MIN(workflow_name) FROM {table} WHERE workflow_name > pairs.name)))
        FROM pairs WHERE pairs.name IS NOT NULL
    )
    SELECT DISTINCT version FROM pairs WHERE name IS NOT NULL
"""


def workflow_names() -> list[str]:
    """The names of the workflows that have instances stored, whether or not they are defined now."""
    return [name for (name,) in _rows(_WORKFLOW_NAMES, [])]


def versions(workflow_name: str | None = None) -> list[str]:
    """The code versions instances were created under: those of one workflow's, or of every one's."""
    if workflow_name is not None:
        return [version for (version,) in _rows(_VERSIONS_OF, [workflow_name, workflow_name])]
    return [version for (version,) in _rows(_VERSIONS, [])]
