"""Idle loops that sleep until the database changes: the change watchers and the ORM broker."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from django_workflows.shared import changes, clock
from django_workflows.executors.broker import ORMBroker
from django_workflows.models import Instance, InstanceStatus

pytestmark = pytest.mark.django_db(transaction=True)


def in_another_thread(fn):
    """Run ``fn`` on another connection (another thread) and commit, as another process would."""
    def target():
        try:
            fn()
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)


def settle(watcher) -> None:
    """Consume what the watcher saw so far (its first wait reports a change: it cannot know the past)."""
    deadline = time.monotonic() + 5
    while watcher.wait(0.2):
        assert time.monotonic() < deadline, "the watcher kept reporting changes with nothing happening"


def expected_kind() -> str:
    return "postgresql-listen" if connection.vendor == "postgresql" else "sqlite-file"


def test_the_queue_watcher_reports_a_task_committed_elsewhere_and_nothing_else():
    watcher = changes.watcher("default", changes.QUEUE_CHANNEL, 0.1)
    try:
        assert watcher.kind == expected_kind()
        settle(watcher)
        assert watcher.wait(0.3) is False
        in_another_thread(lambda: OrmQ.objects.create(key="elsewhere", payload="x", lock=clock.now()))
        assert watcher.wait(3.0) is True
    finally:
        watcher.close()


def test_the_wake_watcher_reports_an_instance_that_starts_waiting():
    now = clock.now()
    instance = Instance.objects.create(workflow_name="sleeper", instance_id="w", created_at=now, updated_at=now)
    watcher = changes.watcher("default", changes.WAKE_CHANNEL, 0.1)
    try:
        settle(watcher)
        in_another_thread(lambda: Instance.objects.filter(pk=instance.pk).update(
            status=InstanceStatus.WAITING, wake_at=now + timedelta(minutes=1)))
        assert watcher.wait(3.0) is True
    finally:
        watcher.close()


def test_polling_reports_a_change_once_per_interval():
    watcher = changes.ChangeWatcher(0.2)
    started = time.monotonic()
    reports = [watcher.wait(0.05) for _ in range(12)]
    # 12 waits of 0.05 s span 0.6 s: a report at the start and after every 0.2 s.
    assert 3 <= sum(reports) <= 4, reports
    assert time.monotonic() - started >= 0.5


@pytest.mark.postgres
def test_a_lost_listening_connection_is_reported_as_a_change_and_replaced():
    watcher = changes.watcher("default", changes.QUEUE_CHANNEL, 0.1)
    try:
        settle(watcher)
        pid = watcher.connection.info.backend_pid
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        # Whatever was notified while nobody listened is unknown: the watcher says so, twice at most
        # (the failure, then the new connection), and listens again.
        assert watcher.wait(1.0) is True
        settle(watcher)
        assert watcher.connection.info.backend_pid != pid
        in_another_thread(lambda: OrmQ.objects.create(key="after", payload="x", lock=clock.now()))
        assert watcher.wait(3.0) is True
    finally:
        watcher.close()


def test_an_idle_broker_does_not_query_its_queue_until_a_task_arrives():
    broker = ORMBroker(list_key="idle-test")
    try:
        assert broker.dequeue() is None  # the first look, then a wait
        assert broker._watcher.kind == expected_kind()
        settle(broker._watcher)
        broker.dequeue()  # the look owed to the watcher's first report (a new LISTEN knows no past)
        with CaptureQueriesContext(connection) as ctx:
            for _ in range(4):
                assert broker.dequeue() is None  # up to 0.5 s each, with nothing new
        assert [q["sql"] for q in ctx.captured_queries if "django_q_ormq" in q["sql"]] == []
        in_another_thread(lambda: OrmQ.objects.create(key="idle-test", payload="task", lock=clock.now()))
        deadline = time.monotonic() + 5
        claimed = None
        while claimed is None and time.monotonic() < deadline:
            claimed = broker.dequeue()
        assert claimed is not None and [payload for _, payload in claimed] == ["task"]
        # The claimed task is locked for this cluster: another broker does not get it.
        assert ORMBroker(list_key="idle-test")._claim() == []
    finally:
        if broker._watcher is not None:
            broker._watcher.close()


@pytest.mark.postgres
def test_a_database_without_the_trigger_is_polled():
    import importlib

    migration = importlib.import_module("django_workflows.migrations.0005_change_notifications")
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER {changes.QUEUE_CHANNEL} ON django_q_ormq")
    watcher = changes.watcher("default", changes.QUEUE_CHANNEL, 0.2)
    try:
        assert watcher.wait(0.1) is True
        assert watcher.kind == "polling" and watcher.connection is None
        reports = [watcher.wait(0.05) for _ in range(8)]  # 0.4 s: a report every 0.2 s
        assert 1 <= sum(reports) <= 3, reports
    finally:
        watcher.close()
        with connection.schema_editor() as editor:
            migration.install(None, editor)


@pytest.fixture
def watched_sqlite(tmp_path):
    """A SQLite database in WAL mode with a table ``t``, and a ``FileWatcher`` of its files."""
    import sqlite3

    path = tmp_path / "watched.sqlite3"
    database = sqlite3.connect(path, isolation_level=None)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("CREATE TABLE t (x)")
    watcher = changes.FileWatcher(str(path))
    yield database, watcher
    watcher.close()
    database.close()


def test_a_reader_that_found_nothing_has_sqlite_files_looked_at_every_few_milliseconds_for_a_moment(watched_sqlite):
    # Commits come in pairs (a claim, then its enqueue): a reader woken by the first follows the second up.
    database, watcher = watched_sqlite
    assert watcher.wait(0.01) is False
    database.execute("INSERT INTO t VALUES (1)")
    assert watcher.wait(2.0) is True
    # A change alone leaves the interval as it was: a reader that found work batches what comes next.
    changed = watcher.changed_at
    assert watcher.interval_at(changed) == changes.STAT_INTERVAL
    watcher.follow_up()
    followed = watcher.followed_up_at
    assert followed <= time.monotonic()
    assert watcher.interval_at(followed) == changes.FOLLOW_UP_INTERVAL
    assert watcher.interval_at(followed + changes.FOLLOW_UP_SECONDS / 2) == changes.FOLLOW_UP_INTERVAL
    after = followed + changes.FOLLOW_UP_SECONDS * 1.01
    assert watcher.interval_at(after) == changes.IDLE_INTERVAL  # the files quiet since the change
    watcher.changed_at = after - changes.IDLE_AFTER_SECONDS / 2
    assert watcher.interval_at(after) == changes.STAT_INTERVAL  # changing: a reader takes a batch
    database.execute("INSERT INTO t VALUES (2)")
    assert watcher.wait(2.0) is True


def test_quiet_sqlite_files_are_looked_at_more_often_than_changing_ones(watched_sqlite, monkeypatch):
    # The first commit after a quiet moment (a timer's claim) is seen within IDLE_INTERVAL; a stream of
    # commits keeps the longer interval, under which a reader takes a batch.
    database, watcher = watched_sqlite
    assert watcher.interval_at(time.monotonic()) == changes.IDLE_INTERVAL < changes.STAT_INTERVAL
    database.execute("INSERT INTO t VALUES (1)")
    assert watcher.wait(2.0) is True
    changed = watcher.changed_at
    assert watcher.interval_at(changed) == changes.STAT_INTERVAL
    assert watcher.interval_at(changed + changes.IDLE_AFTER_SECONDS * 0.99) == changes.STAT_INTERVAL
    assert watcher.interval_at(changed + changes.IDLE_AFTER_SECONDS * 1.01) == changes.IDLE_INTERVAL
    # Waiting on quiet files, the reader looks every IDLE_INTERVAL (a loaded machine may stretch the
    # pauses between two looks, never shorten them).
    looks = _looks(watcher, monkeypatch)
    watcher.changed_at = float("-inf")
    assert watcher.wait(0.2) is False
    gaps = [later - earlier for earlier, later in zip(looks, looks[1:])]
    assert len(gaps) >= 3 and min(gaps) >= changes.IDLE_INTERVAL, gaps


def _looks(watcher, monkeypatch) -> list[float]:
    """The monotonic times at which ``watcher`` looks at the files from now on."""
    looks: list[float] = []
    signature = watcher._signature
    monkeypatch.setattr(watcher, "_signature", lambda: looks.append(time.monotonic()) or signature())
    return looks


def test_a_reader_back_at_once_after_a_change_looks_again_an_interval_after_its_last_look(watched_sqlite,
                                                                                          monkeypatch):
    # A busy worker's replays commit every few milliseconds. Its wake-up loop, woken by a change, reads
    # the next wake time and waits again at once: were the files looked at again at once, it would find
    # the commits made meanwhile and go round without a pause, a query at each turn (a third of a
    # SQLite worker's CPU in the throughput benchmark). The next look comes STAT_INTERVAL after the last.
    database, watcher = watched_sqlite
    looks = _looks(watcher, monkeypatch)
    database.execute("INSERT INTO t VALUES (1)")
    assert watcher.wait(2.0) is True
    database.execute("INSERT INTO t VALUES (2)")  # committed while the reader handled the first
    assert watcher.wait(2.0) is True
    assert looks[-1] - looks[-2] >= changes.STAT_INTERVAL, looks


def test_the_broker_follows_up_a_change_that_brought_no_task_and_not_one_that_did(monkeypatch):
    broker = ORMBroker(list_key="follow-test")
    broker.dequeue()  # builds its watcher
    try:
        followed = []
        monkeypatch.setattr(broker._watcher, "follow_up", lambda: followed.append(True))
        monkeypatch.setattr(broker._watcher, "wait", lambda timeout: True)  # every wait: "it changed"
        broker.dequeue()
        followed.clear()
        assert broker.dequeue() is None  # woken, the queue empty: a follow-up
        assert followed == [True]
        OrmQ.objects.create(key="follow-test", payload="x", lock=clock.now() - timedelta(seconds=1))
        assert broker.dequeue()  # woken, a task taken: no follow-up
        assert followed == [True]
    finally:
        broker._watcher.close()
