"""A migration stopped after its work and before its record is run again, whole, by the next migrate.

A migration that is not atomic (every one that builds an index CONCURRENTLY, or adds columns to the
instance table without holding its lock across all of them) commits each statement on its own, and
Django records it as applied only after its last. A deploy killed in between, or a ``lock_timeout`` on
the record's INSERT, leaves its work done and the migration unrecorded; the next ``migrate`` runs every
operation of it again. Each must find its work done and pass over it: one that fails ("column already
exists") stops every later deploy until someone repairs the database by hand.
"""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from tests import migration_order
from tests.migration_order import APP

pytestmark = pytest.mark.django_db(transaction=True)


def _schema() -> dict:
    """The app's tables, their columns, and their indexes and constraints by name and definition."""
    with connection.cursor() as cursor:
        tables = sorted(name for name in connection.introspection.table_names(cursor) if name.startswith(APP))
        return {
            table: {
                "columns": sorted(column.name for column in connection.introspection.get_table_description(
                    cursor, table)),
                "constraints": {
                    name: (tuple(found["columns"]), found["unique"], found["index"], found["check"],
                           bool(found["foreign_key"]))
                    for name, found in connection.introspection.get_constraints(cursor, table).items()
                },
            }
            for table in tables
        }


def test_every_migration_that_is_not_atomic_runs_again_after_a_stop_before_its_record():
    loader = migration_order.loader()
    names = migration_order.in_order(loader)
    not_atomic = [name for name in names if not loader.get_migration(APP, name).atomic]
    assert len(not_atomic) >= 10, not_atomic  # the test means something only if it reruns them

    migrated = _schema()
    recorder = MigrationRecorder(connection)
    failed = {}
    call_command("migrate", APP, names[0], verbosity=0, skip_checks=True)
    try:
        for name in names[1:]:
            call_command("migrate", APP, name, verbosity=0, skip_checks=True)
            if name not in not_atomic:
                continue
            recorder.record_unapplied(APP, name)
            try:
                call_command("migrate", APP, name, verbosity=0, skip_checks=True)
            except Exception as error:  # noqa: BLE001 - every migration's failure is reported below
                failed[name] = f"{type(error).__name__}: {error}".strip()
                recorder.record_applied(APP, name)
    finally:
        call_command("migrate", APP, verbosity=0, skip_checks=True)

    assert failed == {}, "\n".join(f"{name}: {error}" for name, error in failed.items())
    # Run twice, each migration leaves the tables as run once: no second index, no column missing.
    assert _schema() == migrated
