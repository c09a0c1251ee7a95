"""The journal as a replay reads it: the whole of it loaded once, in one query (``load``), each step an
``Entry`` whose rarely read details are decoded on first use.

The writes are ``journal.JournalWriter``'s.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from django.conf import settings
from django.db import DatabaseError, connections, router

from django_workflows.shared import rows
from django_workflows.store import literals, prepared
from django_workflows.foundations.control_flow import StoreError
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, InstanceStatus, Step, StepKind, StepStatus
from django_workflows.shared.serialization import is_typed
from django_workflows.shared.iso_times import naive_utc_text

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

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

    __slots__ = ("id", "kind", "status", "result", "typed", "settled_in", "woke", "_details", "_decode")

    def __init__(self, id: int, kind: str, status: str, attempts: list[dict[str, Any]], result: Any,  # noqa: A002
                 error: dict[str, Any] | None, wake_at: datetime | None, started_at: datetime,
                 settled_in: int | None = None):
        self.id, self.kind, self.status, self.result = id, kind, status, result
        self.typed = False
        self.settled_in = settled_in
        # A sleep whose wake time had passed when this replay took the lease, journaled over by the
        # statement that took it (``leases.take``): the replay reports its timer fired.
        self.woke = False
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
        entry.woke = len(row) > 10 and bool(row[10])
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


class _EngineStatements:
    # A class, not a @contextmanager: it wraps every step's write, and a generator's setup costs more
    # than the statement's own Python around it.
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: Any) -> None:
        if isinstance(exc, DatabaseError):
            raise StoreError(f"{type(exc).__name__}: {exc}") from exc


_ENGINE_STATEMENTS = _EngineStatements()


def engine_statements() -> _EngineStatements:
    """Turn a database error in the engine's own statements into ``StoreError``."""
    return _ENGINE_STATEMENTS


_JOURNAL_COLUMNS = ("key", "id", "kind", "status", "attempts", "result", "error", "wake_at", "started_at",
                    "settled_in")
_DETAIL_COLUMNS = ("attempts", "error", "wake_at", "started_at")


def journal_columns(connection: BaseDatabaseWrapper, alias: str = "") -> list[str]:
    """The columns ``entries`` reads, on the step table named ``alias`` ("" for the unnamed table)."""
    prefix = f"{alias}." if alias else ""
    return [f"{prefix}{connection.ops.quote_name(c)}" for c in _JOURNAL_COLUMNS]


def entries(fetched: Iterable[Sequence[Any]], connection: BaseDatabaseWrapper) -> dict[str, Entry]:
    """The journal, by step key, from rows of ``journal_columns`` (and, optionally, whether the sleep
    woke as the lease was taken)."""
    details = rows.reader(connection, Step, _DETAIL_COLUMNS)

    def decode_details(values: Sequence[Any]) -> list[Any]:
        return details.decode(values, connection)

    return {row[0]: Entry.from_row(row, decode_details) for row in fetched}


def load(instance_pk: int) -> dict[str, Entry]:
    """The instance's whole journal, by step key, in one query."""
    connection = connections[router.db_for_read(Step)]
    sql = (f"SELECT {', '.join(journal_columns(connection))} "
           f"FROM {connection.ops.quote_name(Step._meta.db_table)} WHERE instance_id = %s")
    with engine_statements(), prepared.cursor(connection) as cursor:
        fetched = prepared.all_rows(cursor, sql, [instance_pk])
    return entries(fetched, connection)


# A sleep of the instance whose lease was just taken is over once its wake time has passed: the statement
# that takes the lease journals it so (ended at its wake time, as the replay would), instead of the
# replay writing it on its own when run() reaches it. Not for an instance past a deadline or being
# terminated with rollback, whose replay stops at the first step the journal has not finished: that
# stays the sleep, as before. Nor for an instance of a workflow whose run() is async: a round of its
# replay settles a due sleep together with what else it settles, and journals that round with it
# (``engine.async_run``), which decides the races run() awaits.
_WAKES_SLEEP = ("{t}.epoch > 1 AND {t}.status = %s AND {t}.deadline IS NULL AND NOT {t}.terminating AND "
                "{s}.kind = %s AND {s}.status = %s AND {s}.wake_at <= %s")


def _wakes_sleep_params(stamp: Any) -> list[Any]:
    return [InstanceStatus.RUNNING.value, StepKind.SLEEP.value, StepStatus.WAITING.value, stamp]


def with_journal_sql(connection: BaseDatabaseWrapper, take_sql: str, claimed: Sequence[str]) -> str:
    """On PostgreSQL, the statement ``take_sql`` (an UPDATE of the instance table returning ``claimed``)
    with the journal read and the sleeps woken in the same statement: a row of ``claimed`` then NULLs, and
    one per journal row of NULLs then ``journal_columns`` and whether the sleep woke. Its parameters:
    ``take_sql``'s, then ``with_journal_params``."""
    ops = connection.ops
    steps = ops.quote_name(Step._meta.db_table)
    journal = journal_columns(connection, "s")
    journal[3] = f"CASE WHEN w.id IS NULL THEN s.{ops.quote_name('status')} ELSE %s END"
    nulls = ", ".join(["NULL"] * (len(journal) + 1))
    return (
        f"WITH taken AS ({take_sql}), "
        f"woke AS (UPDATE {steps} s SET status = %s, ended_at = s.wake_at FROM taken "
        f"WHERE s.instance_id = taken.id AND {_WAKES_SLEEP.format(t='taken', s='s')} "
        "AND NOT (taken.workflow_name = ANY(%s)) RETURNING s.id) "
        f"SELECT {', '.join(f'taken.{ops.quote_name(c)}' for c in claimed)}, {nulls} FROM taken UNION ALL "
        f"SELECT {', '.join(['NULL'] * len(claimed))}, {', '.join(journal)}, w.id IS NOT NULL "
        f"FROM {steps} s JOIN taken ON s.instance_id = taken.id LEFT JOIN woke w ON w.id = s.id "
        "WHERE taken.epoch > 1"
    )


def with_journal_params(stamp: Any) -> list[Any]:
    return [StepStatus.SUCCEEDED.value, *_wakes_sleep_params(stamp), async_workflows(), StepStatus.SUCCEEDED.value]


def async_workflows() -> list[str]:
    """The workflows registered here whose run() is ``async def``, whose sleeps the take leaves alone: read
    off the classes as registered, in one pass, once until a class is registered or unregistered (every
    take on PostgreSQL asks)."""
    global _async_names
    generation, names = _async_names
    if generation != (now := registry.generation):
        names = sorted({cls.name for cls in registry.all() if inspect.iscoroutinefunction(cls.run)})
        _async_names = (now, names)  # one assignment: a thread reads the pair whole
    return names


# The registry's generation, and the names read off it then.
_async_names: tuple[int, list[str]] = (-1, [])


# The text of with_journal_sql by (alias, take's text): a process makes a few.
_WITH_JOURNAL: dict[tuple[str, str], str] = {}


def take_reading_journal(
    connection: BaseDatabaseWrapper, take_sql: str, params: Sequence[Any], claimed: Sequence[str], stamp: Any,
    constant: bool = True,
) -> tuple[Sequence[Any] | None, dict[str, Entry] | None]:
    """Run ``take_sql`` (the UPDATE that takes an instance's lease, returning ``claimed``, ``id`` first)
    and, on PostgreSQL, read the journal of the instance it took, its sleeps woken, in the same
    statement: the row taken (None if none was) and the journal (None where it was not read: the replay
    reads it with ``wake_sleeps_and_load``). ``params`` and ``constant`` as ``literals.bind`` takes them."""
    with prepared.cursor(connection) as cursor:
        if connection.vendor != "postgresql":
            # SQLite has no data-modifying WITH; and its statements cost no round trip.
            return prepared.first_row(cursor, *literals.bind(connection, take_sql, params, constant)), None
        key = (connection.alias, take_sql)
        sql = _WITH_JOURNAL.get(key)
        if sql is None:
            sql = _WITH_JOURNAL[key] = with_journal_sql(connection, take_sql, claimed)
        fetched = prepared.all_rows(cursor, *literals.bind(connection, sql, [*params, *with_journal_params(stamp)],
                                                           constant))
    taken = next((row[:len(claimed)] for row in fetched if row[0] is not None), None)
    return taken, entries((row[len(claimed):] for row in fetched if row[0] is None), connection)


def wake_sleeps_and_load(instance_pk: int, epoch: int, now: datetime, wake: bool = True) -> dict[str, Entry]:
    """What the statement that takes a lease does on PostgreSQL (``with_journal_sql``), as two: wake the
    sleeps of the instance whose lease this replay took at ``epoch`` (fenced by it), then read its journal.
    Nothing at epoch 1, the first lease ever taken on the instance (terminate and restart bump it too):
    journal rows are only written under a lease, so there is nothing to read."""
    if epoch == 1:
        return {}
    if not wake:
        return load(instance_pk)  # an async run() journals its sleeps in its rounds
    connection = connections[router.db_for_write(Step)]
    ops = connection.ops
    table, steps = ops.quote_name(Instance._meta.db_table), ops.quote_name(Step._meta.db_table)
    # The statuses and kinds written in (``literals``): bound, beside the partial indexes on them, they
    # would have SQLite prepare the statement again at every run.
    with engine_statements(), connection.cursor() as cursor:
        cursor.execute(*literals.bind(
            connection,
            f"UPDATE {steps} SET status = %s, ended_at = wake_at WHERE instance_id = %s AND EXISTS "
            f"(SELECT 1 FROM {table} t WHERE t.id = %s AND t.epoch = %s AND "
            f"{_WAKES_SLEEP.format(t='t', s=steps)}) RETURNING id",
            [StepStatus.SUCCEEDED.value, literals.Varying(instance_pk), literals.Varying(instance_pk),
             literals.Varying(epoch), *_wakes_sleep_params(literals.Varying(ops.adapt_datetimefield_value(now)))],
        ))
        woke = {row[0] for row in cursor.fetchall()}
    journal = load(instance_pk)
    for entry in journal.values():
        entry.woke = entry.id in woke
    return journal


class Costs(NamedTuple):
    """What a replay adds to its instance's totals as it gives the lease back (``Instance.cpu_ms``,
    ``Instance.step_wall_ms``): in the statement that releases the lease, which every replay makes, so
    the figures cost no statement of their own. A step's journal write cannot carry them on every
    database: SQLite has no data-modifying WITH, and a trigger on the journal that updated the instance
    table would break every later migration that rebuilds that table on SQLite (Django renames the
    rebuilt table with legacy_alter_table off, and SQLite then refuses a trigger naming the table
    dropped). The price: a replay that dies before its release (its worker killed) or is fenced does
    not add its figures; its journaled attempts keep their own."""

    cpu_ms: float
    step_wall_ms: float


def datetime_adapter(connection: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """The connection's datetime adaptation, with a short cut for SQLite storing UTC, which is
    every write of a replay: Django's adapter checks settings and converts the zone on each call."""
    adapt = connection.ops.adapt_datetimefield_value
    if connection.vendor != "sqlite" or not settings.USE_TZ or connection.timezone is not UTC:
        return adapt

    def adapt_utc(value: Any) -> Any:
        if value is None:  # most of a new instance's times (wake, deadline, end...)
            return None
        if isinstance(value, datetime) and value.tzinfo is UTC:
            return naive_utc_text(value)
        return adapt(value)

    return adapt_utc
