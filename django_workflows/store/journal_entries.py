"""The journal as a replay reads it: the whole of it loaded once, in one query (``load``), each step an
``Entry`` whose rarely read details are decoded on first use.

The writes are ``journal.JournalWriter``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, cast

from django.db import DatabaseError, connections, router

from django_workflows import rows
from django_workflows.control_flow import StoreError
from django_workflows.models import Step
from django_workflows.serialization import is_typed

# Decodes a journal row's attempts, error, wake_at and started_at (rows.RowReader.decode).
DetailDecoder = Callable[[Sequence[Any]], Iterable[Any]]


class Entry:
    """One journaled step as the replay sees it.

    A replay of a long journal mostly needs each step's kind, status and result;
    its attempts, error and times are decoded on first use, so loading 10,000
    steps does not decode 40,000 values it will never look at.

    ``result`` is the journaled JSON; ``typed`` says it holds tagged values (a ``Decimal``, a model
    instance...), which the engine reads back through ``serialization.revive`` when it hands them on.
    """

    __slots__ = ("id", "kind", "status", "result", "typed", "settled_in", "_details", "_decode")

    def __init__(self, id: int, kind: str, status: str, attempts: list[dict[str, Any]], result: Any,  # noqa: A002
                 error: dict[str, Any] | None, wake_at: datetime | None, started_at: datetime,
                 settled_in: int | None = None):
        self.id, self.kind, self.status, self.result = id, kind, status, result
        self.typed = False
        self.settled_in = settled_in
        self._details: Sequence[Any] = (attempts, error, wake_at, started_at)
        self._decode: DetailDecoder | None = None

    @classmethod
    def from_row(cls, row: Sequence[Any], decode_details: DetailDecoder) -> Entry:
        """From a row of ``_JOURNAL_COLUMNS``; ``decode_details`` decodes the rest when asked."""
        entry = cls.__new__(cls)
        entry.id, entry.kind, entry.status = row[1], row[2], row[3]
        text = row[5]
        entry.result = None if text is None else json.loads(text)
        # Tagged values are read back (a model's row fetched) when the replay reaches the step, not here.
        entry.typed = text is not None and is_typed(text)
        entry.settled_in = row[9]
        entry._details = (row[4], row[6], row[7], row[8])
        entry._decode = decode_details
        return entry

    def _detail(self, index: int) -> Any:
        if self._decode is not None:
            self._details, self._decode = tuple(self._decode(self._details)), None
        return self._details[index]

    # Decoded by the fields' converters (JSON text, datetimes) as the ORM would: of the fields' types.
    @property
    def attempts(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", self._detail(0))

    @property
    def error(self) -> dict[str, Any] | None:
        return cast("dict[str, Any] | None", self._detail(1))

    @property
    def wake_at(self) -> datetime | None:
        return cast("datetime | None", self._detail(2))

    @property
    def started_at(self) -> datetime:
        return cast(datetime, self._detail(3))


@contextmanager
def engine_statements() -> Iterator[None]:
    """Turn a database error in the engine's own statements into ``StoreError``."""
    try:
        yield
    except DatabaseError as exc:
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc


_JOURNAL_COLUMNS = ("key", "id", "kind", "status", "attempts", "result", "error", "wake_at", "started_at",
                    "settled_in")
_DETAIL_COLUMNS = ("attempts", "error", "wake_at", "started_at")


def load(instance_pk: int) -> dict[str, Entry]:
    """The instance's whole journal, by step key, in one query."""
    connection = connections[router.db_for_read(Step)]
    ops = connection.ops
    sql = (
        f"SELECT {', '.join(ops.quote_name(c) for c in _JOURNAL_COLUMNS)} "
        f"FROM {ops.quote_name(Step._meta.db_table)} WHERE instance_id = %s"
    )
    details = rows.reader(connection, Step, _DETAIL_COLUMNS)

    def decode_details(values: Sequence[Any]) -> list[Any]:
        return details.decode(values, connection)

    with engine_statements(), connection.cursor() as cursor:
        cursor.execute(sql, [instance_pk])
        fetched = cursor.fetchall()
    return {row[0]: Entry.from_row(row, decode_details) for row in fetched}
