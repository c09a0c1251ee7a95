"""Reading and writing an instance's journal of steps.

A replay reads the whole journal once, in one query. Each write is one
statement in autocommit, so a happy-path step costs one row and one commit.
Every write is fenced: it lands only while the instance's epoch is still the
one this replay's lease was taken with (a terminate, a restart or another
worker taking the lease bumps it), and it returns the instance's status, so
the replay learns of a ``pause()`` without another query.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections, router

from django_workflows.models import Instance, Step


@dataclass(slots=True)
class Entry:
    """One journaled step as the replay sees it."""

    id: int
    kind: str
    status: str
    attempts: list
    result: Any
    error: dict | None
    wake_at: datetime | None
    started_at: datetime


class Fenced(BaseException):
    """The instance's epoch moved on (terminated, restarted, or leased elsewhere): stop this replay.

    A BaseException so that no ``except Exception:`` in user code can swallow it.
    """


def load(instance_pk: int) -> dict[str, Entry]:
    rows = Step.objects.filter(instance_id=instance_pk).values_list(
        "key", "id", "kind", "status", "attempts", "result", "error", "wake_at", "started_at"
    )
    return {row[0]: Entry(*row[1:]) for row in rows}


_JSON_COLUMNS = {"attempts", "config", "result", "error"}


class JournalWriter:
    """The fenced writes of one replay, holding the epoch its lease was taken with."""

    def __init__(self, instance_pk: int, epoch: int):
        self.instance_pk = instance_pk
        self.epoch = epoch
        self.alias = router.db_for_write(Step)
        connection = connections[self.alias]
        self.connection = connection
        ops = connection.ops
        self._adapt_datetime = ops.adapt_datetimefield_value
        json_placeholder = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
        self._placeholders = {
            column: json_placeholder if column in _JSON_COLUMNS else "%s" for column in _FIELD_COLUMNS
        }
        step_table = ops.quote_name(Step._meta.db_table)
        instance_table = ops.quote_name(Instance._meta.db_table)
        # On PostgreSQL, FOR SHARE makes a concurrent epoch bump wait for this
        # write to commit (or makes this write see the bump), closing the gap
        # between the check and the insert.
        lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
        self._fence = f"EXISTS (SELECT 1 FROM {instance_table} fi WHERE fi.id = %s AND fi.epoch = %s{lock})"
        self._returning = f"RETURNING id, (SELECT ri.status FROM {instance_table} ri WHERE ri.id = %s)"
        self._step_table = step_table

    def _value(self, column: str, value):
        if column in _JSON_COLUMNS:
            return None if value is None else (value if isinstance(value, _Encoded) else json.dumps(value))
        if isinstance(value, datetime):
            return self._adapt_datetime(value)
        return value

    def insert(self, **fields) -> tuple[int, str]:
        """Insert a journal row; return ``(step id, instance status)``."""
        fields.setdefault("attempts", _NO_ATTEMPTS)
        columns = list(fields)
        sql = (
            f"INSERT INTO {self._step_table} (instance_id, {', '.join(columns)}) "
            f"SELECT %s, {', '.join(self._placeholders[c] for c in columns)} "
            f"WHERE {self._fence} {self._returning}"
        )
        params = [self.instance_pk, *(self._value(c, fields[c]) for c in columns)]
        params += [self.instance_pk, self.epoch, self.instance_pk]
        return self._execute(sql, params)

    def update(self, step_id: int, **fields) -> tuple[int, str]:
        """Update a journal row; return ``(step id, instance status)``."""
        assignments = ", ".join(f"{c} = {self._placeholders[c]}" for c in fields)
        sql = f"UPDATE {self._step_table} SET {assignments} WHERE id = %s AND {self._fence} {self._returning}"
        params = [*(self._value(c, v) for c, v in fields.items())]
        params += [step_id, self.instance_pk, self.epoch, self.instance_pk]
        return self._execute(sql, params)

    def _execute(self, sql: str, params) -> tuple[int, str]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            raise Fenced()
        return row[0], row[1]


class _Encoded(str):
    """JSON text already encoded (and size-checked) by the engine: written as is."""


def encoded(text: str) -> _Encoded:
    return _Encoded(text)


_NO_ATTEMPTS = _Encoded("[]")


_FIELD_COLUMNS = ("key", "name", "kind", "status", "attempts", "config", "result", "error", "wake_at",
                  "started_at", "ended_at")
