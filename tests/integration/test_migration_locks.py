"""No migration sends a statement while it holds an ACCESS EXCLUSIVE lock on a busy table.

ACCESS EXCLUSIVE stops every read and write of the instance, step and event tables. A migration that took
it for one statement and then sent another before committing held it across whatever ran in between:
Django's own Python between operations (a model state cloned, a RunPython's apps rendered) and a round
trip per statement. That is milliseconds on an idle machine. On a loaded one it was past the live
traffic's lock timeout (tests/system/test_migrations_live.py, 0027 at 208 ms). This counts it without a
clock: before each statement of the migrating connection, another connection looks in ``pg_locks`` for
such a lock the migrating backend still holds. The migrations written since the rule (0027 on) must show
none; the older ones, applied on every site already, are left as they ran.
"""

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from tests import migration_order
from tests.migration_order import APP
from tests.own_connections import dsn

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

FIRST_UNDER_THE_RULE = "0027_watched_instances"
TABLES = ("django_workflows_instance", "django_workflows_step", "django_workflows_event")


def test_no_migration_since_0027_sends_a_statement_while_holding_access_exclusive_on_a_busy_table():
    names = migration_order.in_order()
    first = names.index(FIRST_UNDER_THE_RULE)
    found: dict[str, list[str]] = {}
    call_command("migrate", APP, names[first - 1], verbosity=0, skip_checks=True)
    try:
        with psycopg.connect(**dsn(), autocommit=True) as watcher:
            for name in names[first:]:
                held_before: list[str] = []

                def look(execute, sql, params, many, context):
                    # The migrating backend's own pid, read afresh: a migration may reconnect.
                    pid = connection.connection.info.backend_pid
                    held = watcher.execute(
                        "SELECT c.relname FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation "
                        "WHERE l.pid = %s AND l.granted AND l.mode = 'AccessExclusiveLock' "
                        "AND c.relname = ANY(%s)", (pid, list(TABLES))).fetchall()
                    if held:
                        held_before.append(f"{sorted(table for (table,) in held)} held before: {sql[:90]}")
                    return execute(sql, params, many, context)

                # The migrate command's connection is this thread's: the wrapper sees each statement it sends.
                with connection.execute_wrapper(look):
                    call_command("migrate", APP, name, verbosity=0, skip_checks=True)
                if held_before:
                    found[name] = held_before
    finally:
        call_command("migrate", APP, verbosity=0, skip_checks=True)
    assert not found, found
