"""Counts that stay cheap however many instances are stored: exact while small, estimated above that.

An exact ``COUNT(*)`` reads every row it counts: a million completed instances cost a scan of a million
index entries (or of the table) on every page that shows the number. What a person needs there is the
exact number while it is small (three errored instances, not "about three") and its magnitude when it
is large. So a count reads at most ``EXACT_UP_TO + 1`` rows (``SELECT COUNT(*) FROM (... ORDER BY id
LIMIT n)``: ordered by the primary key, so that the planner walks an index and stops, rather than a
table scan that it expects to stop early but that may read a long way for a rare value), and where that many are there, PostgreSQL's planner estimates the whole
(``EXPLAIN``, from the statistics ``ANALYZE`` and autovacuum keep); it is shown as "about". Other
databases (SQLite, for small sites) count exactly.

Several counts are made together, in two statements whatever their number and whatever the number of
rows: one with every bounded count, one ``EXPLAIN`` of them all (a ``UNION ALL``, whose branches the
planner estimates one by one). The estimate is asked for even when no count needs it, so that a page
makes the same queries with ten instances as with ten million.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, cast

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet

EXACT_UP_TO = 1_000
"""Counts up to this are exact; above it, estimated (on PostgreSQL). Counting a row of a live instance
costs a visit to the table as well as to the index (its page is rarely all-visible: live instances are
written all the time), so a thousand, not ten thousand: eight statuses' worth stay within milliseconds."""


@dataclass(frozen=True)
class Count:
    """A number of rows, and whether it is the planner's estimate rather than counted."""

    value: int
    estimated: bool = False

    def __int__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        return self.value != 0

    def __str__(self) -> str:
        return f"about {self.value:,}" if self.estimated else str(self.value)

    def __add__(self, other: Count) -> Count:
        return Count(self.value + other.value, self.estimated or other.estimated)


def _scalars(template: str, querysets: list[QuerySet]) -> tuple[list[str], list]:
    parts: list[str] = []
    params: list[Any] = []
    for queryset in querysets:
        sql, own = queryset.query.sql_with_params()
        parts.append(template.format(sql=sql))
        params.extend(own)
    return parts, params


def _estimates(connection, querysets: list[QuerySet]) -> list[int] | None:
    """The planner's estimate of each queryset's rows, from one EXPLAIN of their UNION ALL; None if
    the plan's branches cannot be told apart (the planner dropped one it proved empty)."""
    parts, params = _scalars("({sql})", querysets)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {' UNION ALL '.join(parts)}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # Django has psycopg hand JSON over as text
        plan = json.loads(plan)
    plan = plan[0]["Plan"]
    branches = [plan] if len(querysets) == 1 else plan.get("Plans", [])
    if len(branches) != len(querysets):
        return None
    return [int(branch["Plan Rows"]) for branch in branches]


def count_each(querysets: list[QuerySet], exact_up_to: int | None = None, order_by: tuple[str, ...] = ("pk",)
               ) -> list[Count]:
    """How many rows each of ``querysets`` has (they are of one database): exact up to
    ``exact_up_to``, estimated above it on PostgreSQL (never below ``exact_up_to + 1``, which were
    counted; ``EXACT_UP_TO`` by default). Two statements on PostgreSQL, one elsewhere. The bounded counts read their rows in the
    order ``order_by``: the primary key by default, or the order of an index that the querysets'
    filters lead, which then answers them from the index alone."""
    if not querysets:
        return []
    exact_up_to = EXACT_UP_TO if exact_up_to is None else exact_up_to
    connection = connections[querysets[0].db]
    narrow = [queryset.order_by().values("pk") for queryset in querysets]
    postgresql = connection.vendor == "postgresql"
    bounded = [queryset.order_by(*order_by)[: exact_up_to + 1] for queryset in narrow] if postgresql else narrow
    parts, params = _scalars("(SELECT COUNT(*) FROM ({sql}) AS counted)", bounded)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(parts)}", params)
        exact = list(cursor.fetchone())
    if not postgresql:
        return [Count(value) for value in exact]
    estimates = _estimates(connection, narrow) or [0] * len(narrow)
    return [Count(value) if value <= exact_up_to else Count(max(exact_up_to + 1, estimate), estimated=True)
            for value, estimate in zip(exact, estimates, strict=True)]


def count(queryset: QuerySet, exact_up_to: int | None = None) -> Count:
    """``count_each`` of one queryset."""
    return count_each([queryset], exact_up_to)[0]


class CountingPaginator(Paginator):
    """Django's paginator with ``count`` from ``count``: exact up to ``EXACT_UP_TO``, estimated above
    it (``counted.estimated`` says which), where Django's ``COUNT(*)`` would read every row listed on
    every page."""

    @cached_property
    def counted(self) -> Count:
        # The admin's list pages querysets.
        return count(cast(QuerySet, self.object_list))

    @cached_property
    def count(self) -> int:
        return self.counted.value
