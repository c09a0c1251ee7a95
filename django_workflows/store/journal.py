"""Reading and writing an instance's journal of steps.

A replay reads the whole journal once, in one query. Each write is one statement in autocommit, so a
happy-path step costs one row and one commit. Every write is fenced: it lands only while the instance's
epoch is still the one this replay's lease was taken with (a terminate, a restart or another worker taking
the lease bumps it), and it returns the instance's status, so the replay learns of a ``pause()`` without
another query.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections, router, transaction

from django_workflows.shared import clock
from django_workflows.foundations.control_flow import Fenced
from django_workflows.models import Event, Instance, InstanceStatus, Step
from django_workflows.store import children, prepared, steering
from django_workflows.store.inbox import InboxEvent
# The engine knows the journal as this one module: what reading it gives (Entry, load, Costs) is named here
# beside the writer, though journal_entries defines it.
from django_workflows.store.journal_entries import Costs as Costs
from django_workflows.store.journal_entries import Entry as Entry
from django_workflows.store.journal_entries import datetime_adapter, engine_statements
from django_workflows.store.journal_entries import load as load
from django_workflows.store.journal_entries import wake_sleeps_and_load as wake_sleeps_and_load
from django_workflows.store.journal_values import NO_ATTEMPTS, Encoded, attempts_json, encoded as encoded

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper

    from django_workflows.store.lease_keeper import Lease


_JSON_COLUMNS = {"attempts", "config", "result", "error"}
# A row insert_later keeps: its step key, what is called once it is written, and its statement.
_Kept = tuple[str, Callable[[], None], tuple[str, list[Any]]]


class JournalWriter:
    """The statements of one replay once run() runs, holding the epoch its lease was taken with: its fenced
    writes, and the reads it makes as it goes. Each fails as ``StoreError``, never as a DatabaseError that
    run() could catch."""

    def __init__(self, instance_pk: int, epoch: int):
        self.instance_pk = instance_pk
        self.epoch = epoch
        # The replay's lease_keeper.Lease, once held: a lapsed or lost lease fences the next write.
        self.lease: Lease | None = None
        # Once a write or a check of this replay is fenced, it stays fenced: user code may swallow the
        # Fenced raised (an ``except BaseException:`` around a step), and nothing it does after may run
        # a step body or write (``fence``).
        self.fenced = False
        # While an async run()'s round settles its steps, the round: written with each of its rows.
        self.settled_in: int | None = None
        self._pending: _Kept | None = None  # the row insert_later keeps for the next write
        self.alias = router.db_for_write(Step)
        connection = connections[self.alias]
        self.connection = connection
        # Run inside a transaction (a test's, an atomic request's): what waits for a commit waits for it.
        self.in_caller_transaction = connection.in_atomic_block
        ops = connection.ops
        self._adapt_datetime = datetime_adapter(connection)
        json_placeholder = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
        self._json_placeholder = json_placeholder
        # The cursor of _cursor(), and the DB-API connection it was opened on.
        self._open_cursor: CursorWrapper | None = None
        self._open_on: Any = None
        self._placeholders = {
            column: json_placeholder if column in _JSON_COLUMNS else "%s" for column in _FIELD_COLUMNS
        }
        step_table = ops.quote_name(Step._meta.db_table)
        instance_table = ops.quote_name(Instance._meta.db_table)
        # On PostgreSQL, FOR SHARE makes a concurrent epoch bump wait for this write to commit (or makes this
        # write see the bump), closing the gap between the check and the insert.
        lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
        self._fence = f"EXISTS (SELECT 1 FROM {instance_table} fi WHERE fi.id = %s AND fi.epoch = %s{lock})"
        self._returning = f"RETURNING id, (SELECT ri.status FROM {instance_table} ri WHERE ri.id = %s)"
        self._step_table = step_table
        self._instance_table = instance_table

    def _values(self, fields: dict[str, Any], json_columns: Collection[str] = _JSON_COLUMNS) -> list[Any]:
        """The parameters of ``fields``, in their order: JSON encoded (unless the engine encoded it already),
        datetimes as the database takes them. A loop, not a call a column: it runs for every row."""
        values = []
        adapt = self._adapt_datetime
        for column, value in fields.items():
            if column in json_columns:
                if value is not None and not isinstance(value, Encoded):
                    value = attempts_json(value) if column == "attempts" else json.dumps(value)
            elif isinstance(value, datetime):
                value = adapt(value)
            values.append(value)
        return values

    def insert(self, **fields: Any) -> tuple[int, str]:
        """Insert a journal row; return ``(step id, instance status)``."""
        return self._execute(*self._inserting(fields))

    def insert_later(self, written: Callable[[], None], **fields: Any) -> None:
        """``insert`` a succeeded step's row with the replay's next write, not now; ``written()`` is called
        once it has committed. That write is the next step call's, or the release that ends the replay,
        whose transaction the row then joins: a run() that returns after its last step commits that step
        and its end at once. Until then the step is as if unjournaled (a crash runs it again)."""
        self.write_pending()
        self._pending = (fields["key"], written, self._inserting(fields))

    @property
    def keeps_row(self) -> bool:
        """Whether a row ``insert_later`` kept is still to be written."""
        return self._pending is not None

    def write_pending(self) -> tuple[str, str] | None:
        """Write the row ``insert_later`` kept, if any; return ``(its step key, the instance's status)``."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        key, written, statement = pending
        _, status = self._execute(*statement)
        self._once_committed(written)
        return key, status

    def _once_committed(self, written: Callable[[], None]) -> None:
        if self.connection.in_atomic_block and not self.in_caller_transaction:
            transaction.on_commit(written, using=self.alias)
        else:
            written()

    def _inserting(self, fields: dict[str, Any]) -> tuple[str, list[Any]]:
        fields.setdefault("attempts", NO_ATTEMPTS)
        if self.settled_in is not None:
            fields["settled_in"] = self.settled_in
        columns = tuple(fields)
        key = (self.connection.vendor, columns)
        sql = _INSERTS.get(key)
        if sql is None:
            sql = _INSERTS[key] = (
                f"INSERT INTO {self._step_table} (instance_id, {', '.join(columns)}) "
                f"SELECT %s, {', '.join(self._placeholders[c] for c in columns)} "
                f"WHERE {self._fence} {self._returning}"
            )
        params = [self.instance_pk, *self._values(fields), self.instance_pk, self.epoch, self.instance_pk]
        return sql, params

    def update(self, step_id: int, **fields: Any) -> tuple[int, str]:
        """Update a journal row; return ``(step id, instance status)``."""
        if self.settled_in is not None:
            fields["settled_in"] = self.settled_in
        assignments = ", ".join(f"{c} = {self._placeholders[c]}" for c in fields)
        sql = f"UPDATE {self._step_table} SET {assignments} WHERE id = %s AND {self._fence} {self._returning}"
        params = [*self._values(fields), step_id, self.instance_pk, self.epoch, self.instance_pk]
        return self._execute(sql, params)

    def release(self, now: datetime, costs: Costs | None = None, **fields: Any) -> str | None:
        """Give up the lease, add the replay's ``costs`` to the instance's totals and set its
        ``fields``; return the status it left, or None if the epoch moved on.

        ``status`` may be ``WAITING_UNLESS_PAUSE_ASKED``: a pause asked while the replay ran takes
        effect now that it stops (and the status returned is ``paused``).
        """
        status = fields.get("status")
        # A replay that did run() clears the reason an earlier one left for not running it.
        fields.setdefault("waiting_reason", None)
        # A finished replay resets the crash count, unless the fields say otherwise (one that did
        # not run its workflow at all proves nothing about the steps that crashed before).
        fields.setdefault("crash_count", 0)
        assignments, params = _adding(costs)
        if status is WAITING_UNLESS_PAUSE_ASKED:
            fields.pop("status")
            assignments.append("status = CASE WHEN status = %s THEN %s ELSE %s END")
            params += [InstanceStatus.WAITING_FOR_PAUSE, InstanceStatus.PAUSED, InstanceStatus.WAITING]
        for column in fields:
            placeholder = self._json_placeholder if column in _JSON_INSTANCE_COLUMNS else "%s"
            assignments.append(f"{column} = {placeholder}")
        params += self._values(fields, _JSON_INSTANCE_COLUMNS)
        sql = (
            f"UPDATE {self._instance_table} SET lease_owner = '', lease_expires_at = NULL, "
            f"updated_at = %s, {', '.join(assignments)} WHERE id = %s AND epoch = %s"
        )
        params = [self._adapt_datetime(now), *params, self.instance_pk, self.epoch]
        if self.fenced:
            # A step of this replay was refused: whatever run() made of it, its end is not the instance's.
            return None
        if self._pending is not None and self.connection.vendor == "postgresql":
            return self._release_with_kept_row(self._pending, sql, params)
        sql += " RETURNING status"
        with engine_statements(), (transaction.atomic(using=self.alias) if self._pending and
                                   not self.connection.in_atomic_block else nullcontext()):
            # A row kept by insert_later commits with the release, in one transaction.
            self.write_pending()
            released = prepared.all_rows(self._cursor(), sql, params)
        if not released:
            self.fence()
        left: str | None = released[0][0] if released else None
        return left

    def _release_with_kept_row(self, kept: _Kept, release_sql: str, release_params: list[Any]) -> str:
        """On PostgreSQL, the row ``insert_later`` kept and the release in one statement (a data-modifying
        WITH, the release landing only with the row): one round trip where BEGIN, the two statements and
        COMMIT took four. The row refused (the epoch moved on), neither lands and the replay is fenced."""
        _, written, (row_sql, row_params) = kept
        self._pending = None
        self.check_lease()
        with engine_statements():
            released = prepared.all_rows(self._cursor(), f"WITH kept AS ({row_sql}) {release_sql} AND EXISTS "
                                         "(SELECT 1 FROM kept) RETURNING status", [*row_params, *release_params])
        if not released:
            raise self.fence()
        self._once_committed(written)
        return str(released[0][0])

    def release_ending_child(self, parent_pk: int, end: dict[str, Any], now: datetime,
                             costs: Costs | None = None, **fields: Any) -> bool:
        """``release`` for a child workflow that ends: its end is stored in its parent's inbox in the same
        transaction, so a worker that dies in between cannot lose it. False if the epoch moved on (and
        nothing is sent)."""
        with engine_statements(), transaction.atomic(using=self.alias):
            children.lock_parent(parent_pk)
            if not self.release(now, costs, **fields):
                return False
            children.send_end(self.instance_pk, parent_pk, end, now)
        return True

    def release_to_wait_for_events(self, now: datetime, types: Sequence[str], costs: Costs | None = None,
                                   **fields: Any) -> str | None:
        """Give up the lease, leaving the instance waiting for an event of ``types`` (or paused); return
        ``"queued"`` if such an event is in the inbox already (the caller enqueues the replay), the
        status otherwise (``"waiting"`` or ``"paused"``), or None if the epoch moved on.

        One transaction: an event may have been sent between the replay's inbox check and this
        release; the row lock the release holds orders it after that sender, so the check here sees
        its event (and a later sender sees the instance waiting, ``inbox.deliver``)."""
        with engine_statements(), transaction.atomic(using=self.alias):
            status = self.release(now, costs, status=WAITING_UNLESS_PAUSE_ASKED, waiting_for=types, **fields)
            if status != InstanceStatus.WAITING:
                return status  # None (fenced), or paused: a pause was asked meanwhile
            if Event.objects.waiting_for(self.instance_pk, types).exists():
                # Without the wake time: a queued instance keeps one only while a limit holds it back.
                Instance.objects.filter(pk=self.instance_pk, status=InstanceStatus.WAITING).update(
                    status=InstanceStatus.QUEUED, wake_at=None
                )
                return InstanceStatus.QUEUED
        return InstanceStatus.WAITING

    def consume_event(self, types: Sequence[str], received_by: datetime,
                      record: Callable[[InboxEvent, datetime], tuple[int, str]]) -> tuple[InboxEvent, str] | None:
        """Take the oldest buffered event of ``types`` received by ``received_by``, journaling it with
        ``record(event, now) -> (step id, instance status)`` in the same transaction; return
        ``(InboxEvent, instance status)``, or None if the inbox holds none."""
        while True:
            with engine_statements(), transaction.atomic(using=self.alias):
                found = (
                    Event.objects.waiting_for(self.instance_pk, types)
                    .filter(received_at__lte=received_by)
                    .values_list("id", "type", "payload", "received_at")
                    .first()
                )
                if found is None:
                    return None
                event = InboxEvent(*found)
                now = clock.now()
                step_id, status = record(event, now)
                taken = Event.objects.filter(pk=event.id, consumed_by__isnull=True).update(
                    consumed_by=step_id, consumed_at=now
                )
                if not taken:
                    # Consumed by someone else in the meantime: undo the journal row, try the next event.
                    transaction.set_rollback(True, using=self.alias)
                    continue
            return event, status

    def time_out_wait(self, types: Sequence[str], received_by: datetime,
                      record: Callable[[], tuple[int, str]]) -> str | None:
        """Journal a wait's timeout with ``record() -> (step id, instance status)``, unless the inbox holds
        an event of ``types`` received by ``received_by`` (its deadline); return the instance's status, or
        None if it holds one (the caller takes it).

        One transaction, which takes the instance's row lock before it looks in the inbox: an event whose
        sender held that lock (``inbox.deliver``) as the replay read the inbox empty is committed by the
        time the lock is granted, and seen here; the timeout is only journaled once no such event is left.
        """
        with engine_statements(), transaction.atomic(using=self.alias):
            # On SQLite the transaction holds the database's one write lock already.
            lock = " FOR SHARE" if self.connection.vendor == "postgresql" else ""
            held = f"SELECT 1 FROM {self._instance_table} WHERE id = %s AND epoch = %s{lock}"
            if prepared.first_row(self._cursor(), held, [self.instance_pk, self.epoch]) is None:
                raise self.fence()
            if Event.objects.waiting_for(self.instance_pk, types).filter(received_at__lte=received_by).exists():
                return None
            _, status = record()
        return status

    def insert_child(self, child: Instance) -> int | None:
        """Insert a child workflow of this instance and queue its first replay (``steering.insert_child``),
        fenced by this replay's epoch: a terminate, restart or lease taken elsewhere meanwhile raises
        ``Fenced`` and leaves no child. Its pk, or None if its id is an instance's that is not this one's
        child. Called from the body of the step that creates it, where a DatabaseError would be the step's
        failure: run() would catch it, or it would be retried as one."""
        self.check_lease()
        with engine_statements():
            return steering.insert_child(child, self.epoch)

    def child_end(self, child_pk: int) -> dict[str, Any] | None:
        """The end of this instance's child if it has finished (``children.finished_end``)."""
        with engine_statements():
            return children.finished_end(child_pk)

    def abandon(self, now: datetime, wake_at: datetime, costs: Costs | None = None) -> bool:
        """Give up the lease after a ``StoreError`` and have the wake-up loop replay the instance at
        ``wake_at``, adding the replay's ``costs``; the crash count is left as it is. False if the lease is
        not held any more: the epoch moved on, or this replay's release landed and its reply was lost."""
        self._pending = None  # a kept row goes: its step runs again
        adding, added = _adding(costs)
        sql = (
            f"UPDATE {self._instance_table} SET lease_owner = '', lease_expires_at = NULL, "
            "status = CASE WHEN status = %s THEN %s ELSE %s END, wake_at = %s, waiting_for = NULL, "
            f"{''.join(f'{assignment}, ' for assignment in adding)}"
            "updated_at = %s WHERE id = %s AND epoch = %s AND lease_owner <> ''"
        )
        params = [InstanceStatus.WAITING_FOR_PAUSE, InstanceStatus.PAUSED, InstanceStatus.WAITING,
                  self._adapt_datetime(wake_at), *added, self._adapt_datetime(now), self.instance_pk,
                  self.epoch]
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            abandoned: bool = cursor.rowcount > 0
            return abandoned

    def _cursor(self) -> CursorWrapper:
        # One cursor for the replay's writes, as long as the connection it was opened on is the
        # connection's current one (user code may close the connection between steps).
        if self._open_cursor is None or self._open_on is not self.connection.connection:
            self._open_cursor = prepared.cursor(self.connection)
            self._open_on = self.connection.connection
        return self._open_cursor

    def close(self) -> None:
        if self._open_cursor is not None:
            if self._open_on is self.connection.connection:
                self._open_cursor.close()
            self._open_cursor = self._open_on = None

    def check_lease(self) -> None:
        """Raise ``Fenced`` if a write of this replay was fenced, or the lease lapsed unrenewed or a
        renewal found it taken: the epoch check of each write catches a lease taken over, but not a
        step body run meanwhile."""
        if self.fenced or (self.lease is not None and not self.lease.holds()):
            raise self.fence()

    def fence(self) -> Fenced:
        """Mark the replay fenced for good and return the ``Fenced`` to raise.

        The lease is marked lost as well, so the keeper stops renewing it. Raised into run(), a
        ``Fenced`` may be swallowed; every later step call, write and release of the replay then
        meets it again (``check_lease``), as every later step call meets a swallowed suspension: a
        replay that went on would run step bodies another worker may be running, or journal a step
        after one it never journaled."""
        self.fenced = True
        if self.lease is not None:
            self.lease.lost = True
        return Fenced()

    def _execute(self, sql: str, params: Sequence[Any]) -> tuple[int, str]:
        self.write_pending()
        self.check_lease()
        with engine_statements():
            row = prepared.first_row(self._cursor(), sql, params)
        if row is None:
            raise self.fence()
        return row[0], row[1]


def _adding(costs: Costs | None) -> tuple[list[str], list[Any]]:
    """The assignments that add ``costs`` to the instance's totals, and their parameters."""
    if costs is None:
        return [], []
    return ["cpu_ms = cpu_ms + %s", "step_wall_ms = step_wall_ms + %s"], [costs.cpu_ms, costs.step_wall_ms]


WAITING_UNLESS_PAUSE_ASKED = object()
"""The status a suspended replay leaves: waiting, or paused if a pause was asked meanwhile."""

_JSON_INSTANCE_COLUMNS = {"output", "error", "waiting_for"}


# The text of each shape of journal INSERT, by (vendor, columns): a replay writes a handful of shapes.
_INSERTS: dict[tuple[str, tuple[str, ...]], str] = {}


_FIELD_COLUMNS = ("key", "name", "kind", "status", "attempts", "config", "result", "error", "wake_at",
                  "started_at", "ended_at", "settled_in")
