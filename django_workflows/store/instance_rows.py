"""The INSERT of a new instance: its SQL built once per process and database, its values bound per call;
and, for a replay that runs at once in this thread (the inline executor between replays), the instance
created already holding that replay's lease, so that no UPDATE takes it.

``Model.save()`` compiles the INSERT and prepares every field through Django's generic machinery on each
call (0.7 ms of a 5.1 ms ``create()`` on SQLite, issue 37). Here the column list, the statement and how
each column's value is turned into a parameter are worked out once (``_shape``); a call only reads the
row's values and adapts those that need it (times, durations, JSON).

A lease taken by the INSERT is the lease ``leases.take`` would have taken: the same owner, epoch 1 (the
first lease of the instance), the expiry ``LEASE_SECONDS`` from the database's clock, the status
``running`` and the first start noted. It is taken only for an instance that ``leases.take`` would have
let through at once: of a workflow registered here without limits, in a queue this process serves, and
with no queued instance of its queue that it would give way to (checked by the INSERT itself). The
claim is kept for this thread's next replay of the instance (``lease_keeper.take_held``), which then
runs without taking the lease again; the lease keeper renews it from then on, as any other. Should the
replay never come (the process dies), the lease expires and the sweeper takes the instance over, as after
any crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from django.db import connections
from django.db.models import DateTimeField, DurationField, JSONField
from django.db.models.constants import OnConflict

from django_workflows.shared import options, routing
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, InstanceStatus
from django_workflows.store import lease_keeper, literals, prepared
from django_workflows.store.journal_entries import datetime_adapter
from django_workflows.store.literals import Varying
from django_workflows.store.lease_keeper import Held
from django_workflows.store.leases import Claim

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper


@dataclass(frozen=True)
class _Shape:
    """The INSERT of an instance on one database: the attributes it reads, how each becomes a parameter,
    and its SQL, plain and holding the lease."""

    attnames: tuple[str, ...]
    prepare: tuple[Callable[[Any], Any] | None, ...]
    plain: str
    holding: str
    # Several rows at once, a row whose id its workflow has already skipped: the statement up to its
    # VALUES, what follows them, and how many rows one statement takes (the database's limit on parameters).
    many: str
    ignoring: str
    rows_at_most: int
    # Where ``turn_at`` is among the attributes: the INSERT holding the lease compares the row's turn.
    turn_at: int


_shapes: dict[str, _Shape] = {}


def _shape(alias: str) -> _Shape:
    shape = _shapes.get(alias)
    if shape is None:
        shape = _shapes[alias] = _build(connections[alias])
    return shape


def _preparer(field: Any, connection: BaseDatabaseWrapper) -> Callable[[Any], Any] | None:
    """How ``field``'s value becomes a parameter, or None where it is one as it is (text, numbers,
    booleans, keys)."""
    ops = connection.ops
    if isinstance(field, JSONField):
        encoder = field.encoder

        def json_value(value: Any) -> Any:
            return None if value is None else ops.adapt_json_value(value, encoder)

        return json_value
    if isinstance(field, DateTimeField):
        # The journal's adaptation: with its short cut for the UTC datetimes a new instance carries.
        return datetime_adapter(connection)
    if isinstance(field, DurationField):
        if connection.features.has_native_duration_field:
            return None

        def microseconds(value: timedelta | None) -> int | None:
            return None if value is None else (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds

        return microseconds
    return None


def _build(connection: BaseDatabaseWrapper) -> _Shape:
    ops = connection.ops
    fields = [field for field in Instance._meta.concrete_fields if not field.primary_key]
    table = ops.quote_name(Instance._meta.db_table)
    columns = ", ".join(ops.quote_name(cast(str, field.column)) for field in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    # The queued instance a claim of this one would take instead (``leases._preferred_sql``): of its queue,
    # of higher priority and earlier turn, of a workflow this process may take. Its workflows and queues
    # are appended to the statement per call, as this process's registry and served queues say.
    holding = (
        f"INSERT INTO {table} ({columns}) SELECT {placeholders} WHERE NOT EXISTS (SELECT 1 FROM {table} b "
        "WHERE b.queue = %s AND b.priority > %s AND b.turn_at < %s AND b.status = %s{scope}) RETURNING id"
    )
    most = connection.features.max_query_params
    ignoring = ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)
    return _Shape(
        attnames=tuple(field.attname for field in fields),
        prepare=tuple(_preparer(field, connection) for field in fields),
        plain=f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) RETURNING id",
        holding=holding,
        many=f"{ops.insert_statement(on_conflict=OnConflict.IGNORE)} {table} ({columns}) VALUES ",
        ignoring=f" {ignoring}" if ignoring else "",
        rows_at_most=max(1, most // len(fields)) if most else 100,
        turn_at=[field.attname for field in fields].index("turn_at"),
    )


def _values(shape: _Shape, instance: Instance) -> list[Any]:
    row = instance.__dict__
    return [row[name] if prepare is None else prepare(row[name])
            for name, prepare in zip(shape.attnames, shape.prepare, strict=True)]


def _saved(instance: Instance, pk: int, alias: str) -> None:
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = alias


def insert(instance: Instance, alias: str) -> None:
    """Insert the new ``instance`` and set its pk; an id its workflow has already raises
    ``IntegrityError``."""
    shape = _shape(alias)
    with prepared.cursor(connections[alias]) as cursor:
        pk = prepared.first_row(cursor, shape.plain, _values(shape, instance))[0]
    _saved(instance, pk, alias)


def insert_new(instances: Sequence[Instance], alias: str) -> None:
    """Insert those of the new ``instances`` whose ids their workflows do not have yet, skipping the
    others (no error), without setting their pks: one INSERT of as many rows as the database takes
    parameters for, each row's values read as ``insert`` reads them. ``bulk_create`` compiled the
    statement and prepared every field of every row through Django's generic machinery: 70 % of a
    ``create_batch()`` of 100 on SQLite."""
    if not instances:
        return
    shape = _shape(alias)
    row = f"({', '.join(['%s'] * len(shape.attnames))})"
    with prepared.cursor(connections[alias]) as cursor:
        for start in range(0, len(instances), shape.rows_at_most):
            chunk = instances[start:start + shape.rows_at_most]
            cursor.execute(f"{shape.many}{', '.join([row] * len(chunk))}{shape.ignoring}",
                           [value for instance in chunk for value in _values(shape, instance)])


def insert_holding(instance: Instance, alias: str, owner: str, now: datetime, lease_seconds: float) -> bool:
    """Insert the new, queued ``instance`` holding its first replay's lease, kept for this thread's next
    replay of it (``take_held``); return False, inserting nothing, where ``leases.take`` would not let
    that replay through at once: the workflow has limits, or is not this process's to run, or a queued
    instance of higher priority and earlier turn would be taken first. An id its workflow has already
    raises ``IntegrityError``."""
    name = instance.workflow_name
    served = routing.served()
    if name in options.limited() or name not in registry.names() or (served is not None
                                                                      and instance.queue not in served):
        return False
    connection = connections[alias]
    shape = _shape(alias)
    previous = (instance.status, instance.epoch, instance.lease_owner, instance.lease_expires_at,
                instance.started_at, instance.updated_at)
    taken = time.monotonic()
    instance.status, instance.epoch, instance.lease_owner = InstanceStatus.RUNNING, 1, owner
    instance.lease_expires_at = now + timedelta(seconds=lease_seconds)
    instance.started_at = instance.updated_at = now
    values = _values(shape, instance)
    # The turn the holding condition compares is the row's own, adapted as it is written.
    params = [*values, instance.queue, instance.priority, values[shape.turn_at]]
    row = None
    try:
        with prepared.cursor(connection) as cursor:
            row = prepared.first_row(cursor, _holding_text(connection, shape, served), params)
    finally:
        if row is None:  # not inserted: the row is the caller's to insert queued
            (instance.status, instance.epoch, instance.lease_owner, instance.lease_expires_at,
             instance.started_at, instance.updated_at) = previous
    if row is None:
        return False
    _saved(instance, row[0], alias)
    lease_keeper.note_held(Held(_claim(instance), taken, now))
    return True


# The text of the INSERT holding the lease, by database, registry generation and served queues.
_holding_texts: dict[tuple[str, int, tuple[str, ...] | None], str] = {}


def _holding_text(connection: BaseDatabaseWrapper, shape: _Shape, served: tuple[str, ...] | None) -> str:
    """``shape.holding`` for this process's workflows and queues, with the queued status, the workflows
    and the queues written in (``literals``): on SQLite, a status bound as a parameter beside the partial
    indexes on it prepares the statement again at every run. Built once for each set of workflows and
    queues; the row's values, the queue, priority and turn compared with are the parameters."""
    key = (connection.alias, registry.generation, served)
    text = _holding_texts.get(key)
    if text is None:
        names = registry.names()
        scope = f" AND b.workflow_name IN ({', '.join(['%s'] * len(names))})"
        constants: list[Any] = list(names)
        if served is not None:
            scope += f" AND b.queue IN ({', '.join(['%s'] * len(served))})"
            constants += list(served)
        varying = [Varying(None)] * (len(shape.attnames) + 3)
        text, _ = literals.bind(connection, shape.holding.format(scope=scope),
                                [*varying, InstanceStatus.QUEUED.value, *constants])
        if len(_holding_texts) >= 64:
            _holding_texts.clear()
        _holding_texts[key] = text
    return text


def _claim(instance: Instance) -> Claim:
    return Claim(pk=instance.pk, workflow_name=instance.workflow_name, instance_id=instance.instance_id,
                 params=instance.params, status=instance.status, epoch=instance.epoch,
                 created_at=instance.created_at, crash_count=instance.crash_count,
                 terminating=instance.terminating, success_retention=instance.success_retention,
                 error_retention=instance.error_retention, parent_id=instance.parent_id,
                 started_at=instance.started_at, timeout=instance.timeout, deadline=instance.deadline,
                 limit_key=instance.limit_key, queue=instance.queue, priority=instance.priority)


