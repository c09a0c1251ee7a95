"""Time comes from the database: a machine whose clock is off neither shortens another's lease nor
wakes a timer early, and a replay whose lease lapsed or was lost runs no more step bodies.

The skewed processes run under Debian's ``faketime`` (90 s ahead), with the monotonic clock left
alone (FAKETIME_DONT_FAKE_MONOTONIC=1): one host's processes then compare step bodies' times on it.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, connections, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from django_workflows import WorkflowEntrypoint, signals, workflows
from django_workflows.shared import clock
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Step
from django_workflows.engine.replay import replay
from django_workflows.store import lease_keeper
from tests.workers import ROOT, wait_for, wait_status


def skewed_env(skew: str = "+90s") -> dict:
    """The environment of a process whose clock is ``skew`` ahead: libfaketime preloaded (not the
    ``faketime`` command, which would stand between a worker and the signals sent to it)."""
    library = next(iter(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")), None)
    assert library, "Debian's faketime is needed (apt-get install faketime; .ci/run installs it)"
    return {
        "LD_PRELOAD": library,
        "FAKETIME": skew,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # time.sleep fails under faketime: tests/skewed/sitecustomize.py sleeps through select().
        "PYTHONPATH": f"{ROOT / 'tests' / 'skewed'}{os.pathsep}{ROOT}",
    }


def database_time() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0].astimezone(UTC)


# -- the clock ------------------------------------------------------------------------------------

@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_process_whose_clock_is_90_s_ahead_reads_the_database_servers_time():
    script = (
        "import django, json, time; django.setup(); from django_workflows import clock; "
        "print(json.dumps([clock.now().timestamp(), time.time()]))"
    )
    env = {**os.environ, **skewed_env(), "DJANGO_SETTINGS_MODULE": "tests.settings",
           "TEST_DATABASE_NAME": str(connection.settings_dict["NAME"])}
    before = database_time().timestamp()
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    after = database_time().timestamp()
    assert done.returncode == 0, done.stderr
    engine_time, own_time = json.loads(done.stdout.strip().splitlines()[-1])
    assert own_time - after > 80, "faketime did not move the process's clock"
    assert before - 0.5 <= engine_time <= after + 0.5


@pytest.mark.django_db(transaction=True)
def test_the_clock_is_read_on_a_connection_of_its_own_and_only_where_the_database_is_elsewhere():
    reading = clock.DatabaseClock()
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        moment = reading.now()
    # Neither inside the caller's transaction nor in its query count.
    assert len(queries) == 0
    if connection.vendor == "sqlite":
        # The database is a file on this machine: its clock is this machine's, and nothing is read.
        assert reading._local and reading._base is None
        assert abs((moment - datetime.now(UTC)).total_seconds()) < 0.01
    else:
        assert reading._base is not None, "the clock was not read from the database"
        assert abs((moment - database_time()).total_seconds()) < 1


def unreachable_clock() -> clock.DatabaseClock:
    """The clock of a PostgreSQL server that does not answer: nothing listens on its port."""
    settings_dict = {**connections["default"].settings_dict, "PORT": "1"}
    server = type(connections["default"])(settings_dict)
    reading = clock.DatabaseClock()
    reading._database = lambda: server
    return reading


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_before_its_first_reading_the_clock_never_answers_with_this_machines_time():
    reading = unreachable_clock()
    for _ in range(2):  # the attempt that failed, then the wait for its retry
        with pytest.raises(clock.ClockUnavailable, match="has not been read yet .OperationalError"):
            reading.now()
    assert issubclass(clock.ClockUnavailable, DatabaseError), "a replay must treat it as the store failing"


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_thread_that_finds_the_first_reading_under_way_waits_for_it():
    reading = clock.DatabaseClock()
    answers: list = []
    reading._lock.acquire()  # another thread is reading the clock for the first time
    waiting = threading.Thread(target=lambda: answers.append(reading.now()))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive() and not answers, "answered before the database's clock was read"
    reading._lock.release()
    waiting.join(10)
    assert reading._base is not None
    assert abs((answers[0] - database_time()).total_seconds()) < 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_with_the_clock_unread_a_replay_takes_no_lease_and_the_api_answers_503(workflows_env):
    # workflows_env: the recording executor, so creating the instance queues nothing elsewhere.
    handle = workflows.get("approval").create(id="unread-clock", params={})
    before = Instance.objects.values().get(pk=handle.pk)
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    previous = clock.use(unreachable_clock())
    try:
        with pytest.raises(DatabaseError):
            replay(handle.pk)
        response = client.post("/workflows/approval/instances/", {"instance_id": "another"},
                               format="json")
    finally:
        clock.use(previous)
    assert Instance.objects.values().get(pk=handle.pk) == before
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == "5"
    error = response.json()["error"]
    assert error["code"] == "database_unavailable" and "Try again" in error["message"]
    assert not Instance.objects.filter(instance_id="another").exists()


# -- a lease that lapsed or was lost ------------------------------------------------------------

ran: list[str] = []
between_steps: list = []


class BetweenSteps(WorkflowEntrypoint):
    """Two steps, and code of run()'s own between them, where a test makes the lease lapse."""

    name = "between-steps"

    def run(self, event, step):
        step.do("first", lambda: ran.append("first") or 1)
        between_steps[0]()
        step.do("second", lambda: ran.append("second") or 2)
        return "done"


registry.unregister(BetweenSteps)


@pytest.fixture
def between(settings):
    settings.DJANGO_WORKFLOWS = {**getattr(settings, "DJANGO_WORKFLOWS", {}), "LEASE_SECONDS": 1.5}
    ran.clear()
    registry.register(BetweenSteps)
    yield between_steps
    registry.unregister(BetweenSteps)
    between_steps.clear()
    ran.clear()


def renewals_blocked_for(instance_pk: int, seconds: float) -> threading.Thread:
    """Another connection holds the instance's row (PostgreSQL) or the write lock (SQLite) for
    ``seconds``: the lease keeper's renewals wait, as for a database that does not answer."""
    locked = threading.Event()

    def hold():
        try:
            with transaction.atomic():
                Instance.objects.filter(pk=instance_pk).update(current_step=F("current_step"))
                locked.set()
                time.sleep(seconds)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(10)
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_replay_whose_lease_lapsed_unrenewed_runs_no_more_step_bodies(between):
    instance = workflows.get("between-steps").create(id="lapsed")
    blockers = []

    def lapse():
        blockers.append(renewals_blocked_for(instance.pk, 3.0))
        # Past the lease (1.5 s): another worker may have taken it over by now.
        time.sleep(2.0)

    between.append(lapse)
    replay(instance.pk)
    blockers[0].join()
    assert ran == ["first"]
    row = Instance.objects.get(pk=instance.pk)
    # Left as it was, for the sweeper to hand to a worker once the lease has expired.
    assert (row.status, row.epoch) == ("running", 1)
    assert list(Step.objects.filter(instance_id=instance.pk).values_list("name", flat=True)) == ["first"]

    between[0] = lambda: None
    Instance.objects.filter(pk=instance.pk).update(lease_expires_at=clock.now() - timedelta(seconds=1))
    replay(instance.pk)
    assert ran == ["first", "second"]
    assert Instance.objects.get(pk=instance.pk).status == "complete"


@pytest.mark.django_db(transaction=True)
def test_a_replay_whose_lease_lapsed_says_it_let_go_when_the_lease_lapsed(between, caplog):
    """``replay_finished``'s ``released`` is when the replay let go: for one whose lease lapsed unrenewed,
    the moment it lapsed (it wrote nothing after), not when it noticed. Another worker may take the
    instance over from then on, and one instance's replays must never seem to overlap."""
    instance = workflows.get("between-steps").create(id="lapsed-audit")
    finished = []
    blockers = []
    hook_ended = []

    def lapse():
        blockers.append(renewals_blocked_for(instance.pk, 3.0))
        time.sleep(2.0)  # past the lease (1.5 s)
        hook_ended.append(time.time())

    def on_finished(sender, started, released, outcome, **kwargs):
        finished.append((started, released, outcome))

    between.append(lapse)
    signals.replay_finished.connect(on_finished)
    try:
        replay(instance.pk)
    finally:
        signals.replay_finished.disconnect(on_finished)
        for blocker in blockers:
            blocker.join()
    [(started, released, outcome)] = finished
    assert outcome == "fenced"
    # The lease lapsed a margin (0.15 s) before its 1.5 s were up, measured from before the statement that
    # took it; the replay went on in run()'s own code until the hook ended, 2 s in.
    assert released < hook_ended[0] - 0.4, (released - started, hook_ended[0] - started)
    assert 1.0 < released - started <= 1.5 - 0.15
    # Told once, in the worker's log, with when it lapsed.
    [told] = [r for r in caplog.records if hasattr(r, "lapsed_at")]
    assert told.levelname == "WARNING" and "lapsed unrenewed" in told.getMessage()
    assert told.name == "django_workflows.engine.replay" and told.workflow == "between-steps"
    # Told by the replay as it ended, or by the lease keeper before: the same moment, read from the
    # monotonic clock at another instant (microseconds apart).
    assert (told.instance_pk, told.epoch) == (instance.pk, 1) and told.lapsed_at == pytest.approx(released, abs=1e-3)


@pytest.mark.django_db(transaction=True)
def test_a_renewal_that_finds_the_epoch_moved_stops_the_replay_before_its_next_step(between):
    instance = workflows.get("between-steps").create(id="taken-over")

    def taken_over():
        # Another worker took the lease over (or the instance was restarted): the epoch moved on.
        Instance.objects.filter(pk=instance.pk).update(epoch=F("epoch") + 1)
        wait_for(lambda: any(lease.lost for lease in list(lease_keeper.keeper._held.values())), 5,
                 message="a renewal to find the epoch moved")

    between.append(taken_over)
    replay(instance.pk)
    assert ran == ["first"]


# -- a worker 90 s ahead of another ---------------------------------------------------------------

def read_skew_log(directory: Path) -> list[tuple]:
    records = []
    for path in directory.glob("*.jsonl"):
        pid = int(path.stem)
        for line in path.read_text().splitlines():
            try:
                kind, instance_id, key, at = json.loads(line)
            except ValueError:
                continue  # cut short by the end of the test
            records.append((kind, instance_id, key, at, pid))
    return records


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_90_s_ahead_overlaps_no_step_body_with_another_and_wakes_no_timer_early(
        start_worker, redis_broker, tmp_path):  # noqa: F811
    log_dir = tmp_path / "bodies"
    log_dir.mkdir()
    env = {"TEST_SKEW_LOG_DIR": str(log_dir)}
    # A lease well above the bodies' second, so that a loaded machine's late renewal rarely ends one.
    lease = {"LEASE_SECONDS": 6}
    start_worker(name="on-time", broker="redis", env=env, settings=lease)
    start_worker(name="ahead", broker="redis", env={**env, **skewed_env()}, settings=lease)
    nap = 6
    handle = workflows.get("skewed")
    instances = [handle.create(id=f"skew-{n}", params={"steps": 3, "busy": 1.0, "nap": nap}) for n in range(6)]
    for instance in instances:
        wait_status(instance, "complete", 90)

    records = read_skew_log(log_dir)
    pids = {pid for *_, pid in records}
    assert len(pids) >= 2, "both workers should have run step bodies"
    runs = defaultdict(list)  # (instance, key) -> [(start, end, pid)]
    started = {}
    for kind, instance_id, key, at, pid in sorted(records, key=lambda r: r[3]):
        if kind == "run":
            started[(instance_id, key, pid)] = at
        else:
            runs[(instance_id, key)].append((started.pop((instance_id, key, pid)), at, pid))
    for (instance_id, key), spans in runs.items():
        # A replay stopped by a lapsed lease may leave a finished body to run again (at least once),
        # but two runs of one step never overlap: no replay took over a lease that had not expired.
        spans.sort()
        for (_, end, pid), (start, _, other) in zip(spans, spans[1:]):
            assert start >= end, f"{instance_id} {key}: runs in {pid} and {other} overlapped: {spans}"
    assert not started, f"bodies cut short: {started}"
    for instance in instances:
        instance_id = instance.id
        before_nap = runs[(instance_id, "work 2")][-1][1]
        after_nap = runs[(instance_id, "after nap")][0][0]
        # The sleep began once "work 2" was journaled, after its body ended.
        assert after_nap - before_nap >= nap - 0.1, f"{instance_id} woke {after_nap - before_nap:.1f} s after its nap began"
