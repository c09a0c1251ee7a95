"""The app's migrations applied to a live PostgreSQL database.

A site upgrades with its workers running: every migration after the first is applied, one at a time,
to populated tables while another connection keeps reading and writing them with a short
``lock_timeout``, and a third watches ``pg_locks`` and the index builds in progress. No migration may
hold a lock that stops those reads or writes (ACCESS EXCLUSIVE stops both, SHARE and the like stop
writes) for longer than that timeout, nor build an index on those tables without CONCURRENTLY: on a
real site the queries queued behind such a lock are replays and webhooks that stall, then fail.
"""

import multiprocessing
import random
import time

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from tests import migration_order
from tests.migration_order import APP

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

INSTANCES = 200_000
STEPS_PER_INSTANCE = 1
EVENTS_PER_INSTANCE = 1
LOCK_TIMEOUT_MS = 200
TABLES = ("django_workflows_instance", "django_workflows_step", "django_workflows_event")
# The table locks that make a plain INSERT or UPDATE wait (and, for ACCESS EXCLUSIVE, a SELECT too).
# CREATE INDEX CONCURRENTLY and VALIDATE CONSTRAINT take SHARE UPDATE EXCLUSIVE, which stops neither.
BLOCKING_MODES = ("AccessExclusiveLock", "ExclusiveLock", "ShareRowExclusiveLock", "ShareLock")


def _populate() -> None:
    """A site some months old, in the tables as 0001 made them."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO django_workflows_instance (
                workflow_name, instance_id, params, status, output, error, traceback, wake_at,
                waiting_for, current_step, lease_owner, lease_expires_at, epoch,
                created_at, started_at, ended_at, updated_at)
            SELECT
                (ARRAY['orders', 'refunds', 'onboarding'])[1 + i %% 3],
                'instance-' || i,
                jsonb_build_object(
                    'order', i, 'customer', 'customer-' || (i %% 977), 'currency', 'EUR',
                    'items', jsonb_build_array(
                        jsonb_build_object('sku', 'SKU-' || (i %% 5003), 'quantity', 1 + i %% 3,
                                           'price', 1999),
                        jsonb_build_object('sku', 'SKU-' || (i %% 7001), 'quantity', 1, 'price', 4999)),
                    'shipping', jsonb_build_object('street', (i %% 400) || ' Rue de la République',
                                                   'city', 'Lyon', 'postcode', '69002', 'country', 'FR')),
                s.status,
                CASE WHEN s.status = 'complete' THEN jsonb_build_object('charged', i %% 100) END,
                CASE WHEN s.status = 'errored'
                    THEN '{"name": "CardDeclined", "message": "declined"}'::jsonb END,
                '',
                CASE WHEN s.status = 'waiting' THEN now() + (i %% 3600) * interval '1 second' END,
                CASE WHEN s.status = 'waiting' AND i %% 2 = 0 THEN '["approval"]'::jsonb END,
                CASE WHEN s.status IN ('waiting', 'running') THEN 'charge' ELSE '' END,
                CASE WHEN s.status = 'running' THEN 'worker-1' ELSE '' END,
                CASE WHEN s.status = 'running' THEN now() + interval '5 minutes' END,
                1 + i %% 4,
                now() - (i %% 100000) * interval '1 minute',
                now() - (i %% 100000) * interval '1 minute',
                CASE WHEN s.status IN ('complete', 'errored')
                    THEN now() - (i %% 1000) * interval '1 minute' END,
                now() - (i %% 1000) * interval '1 minute'
            FROM generate_series(1, %s) AS i,
                LATERAL (SELECT (ARRAY['complete', 'complete', 'complete', 'waiting', 'errored', 'running',
                                        'queued'])[1 + i %% 7] AS status) AS s
            """,
            [INSTANCES],
        )
        cursor.execute(
            """
            INSERT INTO django_workflows_step (
                instance_id, key, name, kind, status, attempts, config, result, error, wake_at,
                started_at, ended_at)
            SELECT instance.id, 'charge-' || n, 'charge', 'do', 'succeeded',
                jsonb_build_array(jsonb_build_object('start', instance.created_at, 'end', instance.created_at,
                                                     'success', true, 'error', null)),
                '{"retries": {"limit": 5, "delay": "10 seconds"}}'::jsonb,
                jsonb_build_object('charge', instance.id * n), NULL, NULL, instance.created_at,
                instance.created_at
            FROM django_workflows_instance AS instance, generate_series(1, %s) AS n
            """,
            [STEPS_PER_INSTANCE],
        )
        cursor.execute(
            """
            INSERT INTO django_workflows_event (instance_id, type, payload, received_at, sender)
            SELECT instance.id, 'approval', jsonb_build_object('approved', instance.id %% 2 = 0),
                instance.created_at, 'webhook:crm'
            FROM django_workflows_instance AS instance, generate_series(1, %s)
            """,
            [EVENTS_PER_INSTANCE],
        )
        cursor.execute("ANALYZE " + ", ".join(TABLES))


def _schema_faults() -> list[str]:
    """What a migration stopped half-way, or an index Django builds by habit, would leave behind. The
    habit is the ``…_like`` copy of a text column's index (``varchar_pattern_ops``) that Django adds
    for LIKE lookups nobody makes; ``dw_instance_unique_by_id`` is declared for the admin's search by an
    id's beginning, and is not one."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT 'invalid index ' || index.relname FROM pg_index JOIN pg_class AS index
                ON index.oid = pg_index.indexrelid
            WHERE pg_index.indrelid = ANY(%s::regclass[]) AND NOT pg_index.indisvalid
            UNION ALL
            SELECT 'LIKE index ' || index.relname FROM pg_index JOIN pg_class AS index
                ON index.oid = pg_index.indexrelid JOIN pg_opclass ON pg_opclass.oid = ANY(pg_index.indclass)
            WHERE pg_index.indrelid = ANY(%s::regclass[]) AND pg_opclass.opcname LIKE '%%pattern_ops'
                AND right(index.relname, 5) = '_like'
            UNION ALL
            SELECT 'constraint not validated ' || conname FROM pg_constraint
            WHERE conrelid = ANY(%s::regclass[]) AND NOT convalidated
            """,
            [list(TABLES)] * 3,
        )
        return [fault for (fault,) in cursor.fetchall()]


def _constraints(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass", [table])
        return {name for (name,) in cursor.fetchall()}


def _connect(settings: dict) -> psycopg.Connection:
    return psycopg.connect(
        dbname=settings["NAME"], user=settings["USER"] or None, password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None, port=settings["PORT"] or None, autocommit=True,
    )


def _traffic(settings, phase, stop, results) -> None:
    """Small reads and writes, as replays and webhooks make them, that give up on a lock after the
    timeout instead of queueing behind it. Per migration: statements run, the longest one, those that
    gave up on a lock, and those that failed otherwise."""
    stats: dict[int, dict] = {}
    rng = random.Random(19)
    serial = 0
    with _connect(settings) as db:
        db.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
        # The ids the populated rows got: the sequence goes on from whatever earlier tests used.
        first, last = db.execute("SELECT min(id), max(id) FROM django_workflows_instance").fetchone()
        results.put(("ready", "traffic"))
        while not stop.is_set():
            serial += 1
            pk = rng.randint(first, last)
            for sql, params in (
                ("SELECT status, wake_at FROM django_workflows_instance WHERE id = %s", (pk,)),
                ("UPDATE django_workflows_instance SET updated_at = now(), epoch = epoch + 1 WHERE id = %s",
                 (pk,)),
                ("INSERT INTO django_workflows_step (instance_id, key, name, kind, status, attempts, "
                 "started_at) VALUES (%s, %s, 'poll', 'do', 'succeeded', '[]', now())",
                 (pk, f"poll-{serial}")),
                ("INSERT INTO django_workflows_event (instance_id, type, payload, received_at, sender) "
                 "VALUES (%s, 'approval', '{}', now(), '')", (pk,)),
                ("SELECT id FROM django_workflows_event WHERE instance_id = %s AND consumed_by_id IS NULL",
                 (pk,)),
            ):
                during = stats.setdefault(
                    phase.value, {"statements": 0, "longest_ms": 0.0, "gave_up": [], "failed": []}
                )
                started = time.monotonic()
                try:
                    db.execute(sql, params)
                except psycopg.errors.LockNotAvailable:
                    during["gave_up"].append(" ".join(sql.split()[:3]))
                except psycopg.Error as error:
                    during["failed"].append(f"{' '.join(sql.split()[:3])}: {str(error).splitlines()[0]}")
                during["statements"] += 1
                during["longest_ms"] = max(during["longest_ms"], (time.monotonic() - started) * 1000)
    results.put(("traffic", stats))


def _watch(settings, phase, stop, results) -> None:
    """What other sessions do to the populated tables, from pg_locks and pg_stat_progress_create_index
    sampled every few milliseconds, per migration (the one during which it began): the longest time a
    blocking lock was held, and the indexes built without CONCURRENTLY, which stop writes for as long
    as they read and sort the table, however fast this machine does it."""
    longest: dict[int, dict[str, float]] = {}
    builds: dict[int, set[str]] = {}
    since: dict[tuple[str, str], tuple[float, int]] = {}
    with _connect(settings) as db:
        results.put(("ready", "watch"))
        while True:
            stopping = stop.is_set()
            now = time.monotonic()
            held = set(
                db.execute(
                    """
                    SELECT c.relname, l.mode FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
                    WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
                        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                        AND c.relname = ANY(%s) AND l.mode = ANY(%s)
                    """,
                    (list(TABLES), list(BLOCKING_MODES)),
                ).fetchall()
            )
            for table, command in db.execute(
                """
                SELECT c.relname, p.command FROM pg_stat_progress_create_index AS p
                JOIN pg_class AS c ON c.oid = p.relid
                WHERE p.datname = current_database() AND c.relname = ANY(%s)
                    AND p.command NOT LIKE '%%CONCURRENTLY'
                """,
                (list(TABLES),),
            ):
                builds.setdefault(phase.value, set()).add(f"{command} on {table}")
            for lock in held:
                since.setdefault(lock, (now, phase.value))
            for lock in list(since):
                if lock not in held or stopping:
                    (table, mode), (first, during) = lock, since.pop(lock)
                    key = f"{mode} on {table}"
                    longest.setdefault(during, {})
                    longest[during][key] = max(longest[during].get(key, 0.0), (now - first) * 1000)
            if stopping:
                break
            time.sleep(0.002)
    results.put(("watch", {"locks": longest, "builds": builds}))


def test_no_migration_stops_reads_or_writes_on_populated_tables(capsys):
    names = migration_order.in_order()
    started = time.monotonic()
    call_command("migrate", APP, names[0], verbosity=0, skip_checks=True)
    # The traffic and the watch run in processes of their own: threads would wait for the GIL while
    # the migrate command renders model states, and see far fewer statements and samples.
    spawn = multiprocessing.get_context("spawn")
    phase, stop, results = spawn.Value("i", -1), spawn.Event(), spawn.Queue()
    site = [spawn.Process(target=target, args=(connection.settings_dict, phase, stop, results))
            for target in (_traffic, _watch)]
    rows, took = {}, {}
    try:
        _populate()
        with connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"SELECT count(*) FROM {table}")
                rows[table] = cursor.fetchone()[0]
        populated = time.monotonic()
        for process in site:
            process.start()
        for _ in site:
            assert results.get(timeout=30)[0] == "ready"
        for index, name in enumerate(names[1:]):
            phase.value = index
            applying = time.monotonic()
            call_command("migrate", APP, name, verbosity=0, skip_checks=True)
            took[name] = time.monotonic() - applying
            phase.value = -1
    finally:
        stop.set()
        figures = dict(results.get(timeout=30) for process in site if process.pid)
        for process in site:
            if process.pid:
                process.join(timeout=30)
        call_command("migrate", APP, verbosity=0, skip_checks=True)

    traffic, watch, builds = figures["traffic"], figures["watch"]["locks"], figures["watch"]["builds"]
    lines = [
        f"{rows} rows; populated in {populated - started:.1f} s, migrated in {sum(took.values()):.1f} s; "
        f"lock_timeout {LOCK_TIMEOUT_MS} ms",
        f"{'migration':36} {'took':>6} {'statements':>10} {'longest':>8} {'gave up':>7}  "
        "longest blocking lock",
    ]
    for index, name in enumerate(names[1:]):
        ran = traffic.get(index, {"statements": 0, "longest_ms": 0.0, "gave_up": [], "failed": []})
        locks = watch.get(index, {})
        lock = max(locks, key=locks.get) if locks else None
        lines.append(
            f"{name:36} {took[name]:5.2f}s {ran['statements']:10} {ran['longest_ms']:6.0f}ms "
            f"{len(ran['gave_up']):7}  {f'{locks[lock]:.0f} ms {lock}' if lock else '-'}"
            + "".join(f"; {build}" for build in sorted(builds.get(index, ())))
            + "".join(f"; {failure}" for failure in sorted(set(ran["failed"])))
        )
    with capsys.disabled():
        print("\n" + "\n".join(lines))

    gave_up = {index: ran["gave_up"] for index, ran in traffic.items() if index >= 0 and ran["gave_up"]}
    held = {index: locks for index, locks in watch.items()
            if index >= 0 and max(locks.values()) > LOCK_TIMEOUT_MS}
    blocking_builds = {index: found for index, found in builds.items() if index >= 0}
    failed = {index: ran["failed"] for index, ran in traffic.items() if ran["failed"]}
    assert not gave_up and not held and not blocking_builds and not failed, "\n".join(lines)
    # The figures mean something only if the traffic ran through every migration.
    assert all(traffic.get(index, {}).get("statements") for index in range(len(names) - 1)), "\n".join(lines)

    assert _schema_faults() == []
    # The names a plain AddField gives them, so that databases migrated before and after agree.
    assert "django_workflows_event_delivery_key" in _constraints("django_workflows_event")
    assert "django_workflows_instance_crash_count_check" in _constraints("django_workflows_instance")


def test_the_like_index_that_0006_used_to_build_is_dropped():
    from django_workflows.models import Event  # not at the top: the traffic's processes import this module

    names = migration_order.in_order()
    before = names[names.index("0009_drop_event_delivery_like_index") - 1]
    call_command("migrate", APP, before, verbosity=0, skip_checks=True)
    try:
        # The statement the former 0006 ran, under the name Django gives the index.
        with connection.schema_editor() as editor:
            editor.execute(editor._create_like_index_sql(Event, Event._meta.get_field("delivery")))
        assert [fault for fault in _schema_faults() if fault.startswith("LIKE index")]
    finally:
        call_command("migrate", APP, verbosity=0, skip_checks=True)
    assert _schema_faults() == []
    assert "django_workflows_event_delivery_key" in _constraints("django_workflows_event")
