"""Cron schedules on a workflow class: the slots an expression names (time zones, DST, a seconds field),
the ids of their instances, the rounds workers run against the database (one instance per slot however
many workers handle it), catch-up after downtime, what an idle worker pays, the CLI listing and the
system checks."""

import io
import json
import logging
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.surfaces import checks
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, Schedule
from django_workflows.shared.options import WorkflowOptions
from django_workflows.shared.cron import (
    MAX_CATCH_UP,
    CronSchedule,
    schedule_key,
    slot_instance_id,
)
from django_workflows.store import dispatch
from django_workflows.store.schedules import Scheduler
from django_workflows.testing import run_workflows
from django_workflows.foundations.validation import validate_instance_id
from django_workflows.surfaces.worker import Worker

MONDAY = datetime(2026, 3, 2, 7, 30, tzinfo=UTC)  # 08:30 in Paris (CET, +01:00)


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.fixture
def env(db):
    """``workflows_env`` with its manual clock started on a known Monday morning."""
    with run_workflows(start=MONDAY) as environment:
        yield environment


@pytest.fixture
def define():
    """Define a workflow class with schedules for one test (unregistered afterwards, so that no other
    test's worker or listing sees it)."""
    made = []

    def make(name, schedules, timezone=None, catch_up=None):
        attrs = {"name": name, "schedules": schedules, "run": lambda self, event, step: event.payload}
        if timezone is not None:
            attrs["schedule_timezone"] = timezone
        if catch_up is not None:
            attrs["schedule_catch_up"] = catch_up
        cls = type(f"Scheduled_{name.replace('-', '_')}", (WorkflowEntrypoint,), attrs)
        made.append(cls)
        return cls

    yield make
    for cls in made:
        registry.unregister(cls)


def slots_of(name: str) -> list[datetime]:
    """The scheduled times of a workflow's instances made for slots, oldest first, read from their params."""
    params = Instance.objects.filter(workflow_name=name).values_list("params", flat=True)
    return sorted(datetime.fromisoformat(p["scheduled_time"]) for p in params if p and "scheduled_time" in p)


def statements(ctx) -> list[str]:
    """What a round sent the database, without the savepoints of the test's own transaction."""
    return [q["sql"] for q in ctx.captured_queries
            if not q["sql"].upper().startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT"))]


def run_until(scheduler: Scheduler, env, end: datetime, step: timedelta | None = None) -> None:
    """Move the clock to ``end`` as a worker's loop would: to each next due slot, or by ``step``, with a
    round at each stop."""
    while True:
        due = scheduler.next_due
        target = min(due, end) if step is None else min(env.now + step, end)
        env.clock.set(max(env.now, target))
        scheduler.run_due(env.now)
        if env.now >= end:
            return


# -- slots ---------------------------------------------------------------------------------------

def test_weekday_mornings_in_paris_are_at_nine_local_time_in_winter_and_summer(env, define):
    cls = define("mornings", ["0 9 * * mon-fri"], "Europe/Paris")
    [spec] = WorkflowOptions.of(cls).schedules
    assert spec.cron.upcoming(env.now, 6) == [at(2026, 3, d, 8) for d in (2, 3, 4, 5, 6, 9)]
    # Across the change to summer time (29 March 2026): 09:00 is then 07:00 UTC.
    assert spec.cron.upcoming(at(2026, 3, 27, 12), 2) == [at(2026, 3, 30, 7), at(2026, 3, 31, 7)]


def test_the_default_time_zone_is_utc(env, define):
    cls = define("utc-default", ["0 9 * * mon-fri"])
    [spec] = WorkflowOptions.of(cls).schedules
    assert spec.timezone == "UTC" and spec.catch_up == "latest"
    assert spec.cron.upcoming(env.now, 1) == [at(2026, 3, 2, 9)]


def test_six_fields_put_seconds_first_at_one_second_resolution(env):
    every_second = CronSchedule("* * * * * *")
    assert every_second.upcoming(env.now, 3) == [env.now + timedelta(seconds=s) for s in (1, 2, 3)]
    every_ten = CronSchedule("*/10 * * * * *")
    assert every_ten.upcoming(env.now, 2) == [at(2026, 3, 2, 7, 30, 10), at(2026, 3, 2, 7, 30, 20)]
    assert CronSchedule("*/10 * * * *").upcoming(env.now, 2) == [at(2026, 3, 2, 7, 40), at(2026, 3, 2, 7, 50)]
    assert CronSchedule("@hourly").upcoming(env.now, 1) == [at(2026, 3, 2, 8)]


def test_a_slot_instance_id_names_the_expression_the_zone_and_the_slot():
    key = schedule_key("0 9 * * mon-fri", "Europe/Paris")
    assert schedule_key("0  9 * * MON-FRI", "Europe/Paris") == key  # one schedule, however it is spaced
    assert schedule_key("0 9 * * mon-fri", "UTC") != key
    assert schedule_key("0 10 * * mon-fri", "Europe/Paris") != key
    paris = CronSchedule("@daily", "Europe/Paris").zone
    instance_id = slot_instance_id(key, datetime(2026, 3, 2, 9, tzinfo=paris))
    assert instance_id == f"cron-{key}-20260302T080000Z"
    assert validate_instance_id(instance_id) == instance_id and len(instance_id) == 32


# -- rounds --------------------------------------------------------------------------------------

def test_a_round_creates_the_due_slot_once_with_its_time_and_cron_in_the_params(env, define):
    define("hourly", ["0 * * * *"])
    scheduler = Scheduler()
    assert scheduler.run_due(env.now) == 0  # the first look makes the row: its first slot is the next one
    [row] = Schedule.objects.all()
    assert (row.workflow_name, row.cron, row.timezone, row.next_slot, row.last_slot) == (
        "hourly", "0 * * * *", "UTC", at(2026, 3, 2, 8), None)
    assert scheduler.next_due == at(2026, 3, 2, 8)
    env.clock.set(at(2026, 3, 2, 8, 0, 0, 200_000))
    assert scheduler.run_due(env.now) == 1
    instance = Instance.objects.get(workflow_name="hourly")
    assert instance.instance_id == f"cron-{row.key}-20260302T080000Z"
    expected = {"cron": "0 * * * *", "scheduled_time": "2026-03-02T08:00:00+00:00",
                "scheduledTime": 1772438400000, "timezone": "UTC"}
    assert instance.params == expected and instance.status == "queued"
    env.run_until_idle()
    assert workflows.get("hourly").get(instance.instance_id).status()["output"] == expected
    row.refresh_from_db()
    assert (row.next_slot, row.last_slot) == (at(2026, 3, 2, 9), at(2026, 3, 2, 8))
    # Nothing is due until 09:00: no statement at all.
    env.clock.advance(timedelta(minutes=30))
    with CaptureQueriesContext(connection) as ctx:
        assert scheduler.run_due(env.now) == 0
    assert ctx.captured_queries == []


def test_a_slot_s_instance_has_the_deadline_its_class_declares(env, define):
    # A scheduled run is an instance like any other: its class's timeout gives it a deadline.
    cls = define("hourly-with-deadline", ["0 * * * *"])
    cls.timeout = "20 minutes"
    registry.register(cls)
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    env.clock.set(at(2026, 3, 2, 8))
    assert scheduler.run_due(env.now) == 1
    instance = Instance.objects.get(workflow_name="hourly-with-deadline")
    assert (instance.timeout, instance.deadline) == (timedelta(minutes=20), at(2026, 3, 2, 8, 20))


def test_two_workers_handling_the_same_slot_create_one_instance(env, define):
    define("every-second", ["* * * * * *"])
    first, second = Scheduler(), Scheduler()
    first.run_due(env.now)
    second.run_due(env.now)
    assert Schedule.objects.count() == 1
    assert first.next_due == second.next_due == env.now + timedelta(seconds=1)
    for winner, loser in [(first, second), (second, first), (first, second)]:
        env.clock.advance(timedelta(seconds=1))
        assert winner.run_due(env.now) == 1
        with CaptureQueriesContext(connection) as ctx:
            assert loser.run_due(env.now) == 0
        # The loser's round is one statement: the locked read that finds the slot dealt with.
        [read] = statements(ctx)
        assert read.startswith("SELECT")
        if connection.vendor == "postgresql":
            assert "FOR UPDATE" in read
        assert loser.next_due == winner.next_due == env.now + timedelta(seconds=1)
    assert slots_of("every-second") == [MONDAY + timedelta(seconds=s) for s in (1, 2, 3)]
    assert Instance.objects.filter(workflow_name="every-second").count() == 3


def test_a_slot_whose_id_exists_is_absorbed_and_the_schedule_moves_on(env, define):
    define("absorbed", ["0 * * * *"])
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    key = Schedule.objects.get().key
    by_hand = workflows.get("absorbed").create(id=f"cron-{key}-20260302T080000Z", params={"by": "hand"})
    env.clock.set(at(2026, 3, 2, 8, 0, 1))
    assert scheduler.run_due(env.now) == 0
    assert Instance.objects.filter(workflow_name="absorbed").count() == 1
    assert Instance.objects.get(workflow_name="absorbed").pk == by_hand.pk
    assert scheduler.next_due == at(2026, 3, 2, 9) == Schedule.objects.get().next_slot
    # A row put back to a slot already created (restored from a backup, say) creates it no second time,
    # and goes on with the next slot.
    env.clock.set(at(2026, 3, 2, 9, 0, 1))
    assert scheduler.run_due(env.now) == 1
    Schedule.objects.update(next_slot=at(2026, 3, 2, 9))
    assert Scheduler().run_due(env.now) == 0
    assert slots_of("absorbed") == [at(2026, 3, 2, 9)]
    assert Instance.objects.filter(workflow_name="absorbed").count() == 2
    assert Schedule.objects.get().next_slot == at(2026, 3, 2, 10)


def test_a_deleted_schedule_row_is_made_again_without_catching_up(env, define):
    define("remade", ["0 * * * *"])
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    Schedule.objects.all().delete()
    env.clock.set(at(2026, 3, 2, 8, 0, 1))
    assert scheduler.run_due(env.now) == 0  # the round finds no row: it is made again at the next look
    assert scheduler.run_due(env.now) == 0
    assert Schedule.objects.get().next_slot == at(2026, 3, 2, 9)


# -- catch-up ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "created", "skipped"), [
    ("latest", [12], True),
    ("all", [8, 9, 10, 11, 12], False),
    ("none", [], True),
])
def test_catch_up_after_downtime(env, define, caplog, policy, created, skipped):
    define(f"down-{policy}", ["0 * * * *"], catch_up=policy)
    Scheduler().run_due(env.now)  # a worker saw the schedule at 07:30, then every worker was down
    env.clock.set(at(2026, 3, 2, 12, 30))
    back = Scheduler()
    with caplog.at_level(logging.WARNING, logger="django_workflows.schedules"):
        back.run_due(env.now)
    assert slots_of(f"down-{policy}") == [at(2026, 3, 2, hour) for hour in created]
    assert ("skipped slots missed" in caplog.text) is skipped
    assert back.next_due == at(2026, 3, 2, 13)
    # Back in time for the next slot, every policy creates it.
    env.clock.set(at(2026, 3, 2, 13, 0, 5))
    back.run_due(env.now)
    assert slots_of(f"down-{policy}")[-1] == at(2026, 3, 2, 13)
    assert len(slots_of(f"down-{policy}")) == len(created) + 1


def test_catch_up_all_creates_the_most_recent_slots_up_to_the_bound(env, define):
    define("down-long", ["* * * * *"], catch_up="all")
    Scheduler().run_due(env.now)
    env.clock.set(MONDAY + timedelta(hours=3, seconds=30))
    assert Scheduler().run_due(env.now) == MAX_CATCH_UP
    slots = slots_of("down-long")
    assert slots[-1] == MONDAY + timedelta(hours=3)
    assert slots == [slots[-1] - timedelta(minutes=n) for n in range(MAX_CATCH_UP - 1, -1, -1)]


def test_slots_within_a_minute_are_on_time_whatever_the_policy(env, define):
    define("busy", ["* * * * * *"], catch_up="none")
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    env.clock.advance(timedelta(seconds=30))  # a worker late by 30 s misses nothing
    assert scheduler.run_due(env.now) == 30
    env.clock.advance(timedelta(seconds=90))  # 90 s late: the slots of the last minute only
    assert scheduler.run_due(env.now) == 61
    slots = slots_of("busy")
    assert slots[:30] == [MONDAY + timedelta(seconds=s) for s in range(1, 31)]
    assert slots[30:] == [MONDAY + timedelta(seconds=s) for s in range(60, 121)]


# -- time zones and daylight saving ----------------------------------------------------------------

def test_a_daily_time_skipped_by_the_spring_change_runs_when_the_clocks_jump(db, define):
    with run_workflows(start=at(2026, 3, 27, 12)) as env:
        define("spring-daily", ["30 2 * * *"], "Europe/Paris")
        scheduler = Scheduler()
        scheduler.run_due(env.now)
        run_until(scheduler, env, at(2026, 3, 31, 12))
        # 02:30 does not exist on 29 March in Paris: it runs at 03:00 CEST (01:00 UTC).
        assert slots_of("spring-daily") == [at(2026, 3, 28, 1, 30), at(2026, 3, 29, 1),
                                            at(2026, 3, 30, 0, 30), at(2026, 3, 31, 0, 30)]


def test_a_daily_time_repeated_by_the_autumn_change_runs_once(db, define):
    with run_workflows(start=at(2026, 10, 23, 12)) as env:
        define("autumn-daily", ["30 2 * * *"], "Europe/Paris")
        scheduler = Scheduler()
        scheduler.run_due(env.now)
        run_until(scheduler, env, at(2026, 10, 27, 12), step=timedelta(minutes=10))
        # 02:30 happens twice on 25 October: at 00:30 UTC (CEST) and 01:30 UTC (CET); it runs at the first.
        assert slots_of("autumn-daily") == [at(2026, 10, 24, 0, 30), at(2026, 10, 25, 0, 30),
                                            at(2026, 10, 26, 1, 30), at(2026, 10, 27, 1, 30)]


def test_half_hours_through_both_changes_each_wall_clock_time_once(db, define):
    with run_workflows(start=at(2026, 3, 28, 23)) as env:
        define("spring-halves", ["*/30 * * * *"], "Europe/Paris")
        scheduler = Scheduler()
        scheduler.run_due(env.now)
        run_until(scheduler, env, at(2026, 3, 29, 2, 40), step=timedelta(minutes=7))
        # 02:00 and 02:30 do not exist: they fall on 03:00 CEST (01:00 UTC), which is one slot.
        assert slots_of("spring-halves") == [at(2026, 3, 28, 23, 30), at(2026, 3, 29, 0),
                                             at(2026, 3, 29, 0, 30), at(2026, 3, 29, 1),
                                             at(2026, 3, 29, 1, 30), at(2026, 3, 29, 2),
                                             at(2026, 3, 29, 2, 30)]
    with run_workflows(start=at(2026, 10, 24, 23)) as env:
        define("autumn-halves", ["*/30 * * * *"], "Europe/Paris")
        scheduler = Scheduler()
        scheduler.run_due(env.now)
        run_until(scheduler, env, at(2026, 10, 25, 3, 10), step=timedelta(minutes=7))
        # 02:00 and 02:30 come twice (00:00 and 00:30 UTC in CEST, 01:00 and 01:30 UTC in CET): once each.
        assert slots_of("autumn-halves") == [at(2026, 10, 24, 23, 30), at(2026, 10, 25, 0),
                                             at(2026, 10, 25, 0, 30), at(2026, 10, 25, 2),
                                             at(2026, 10, 25, 2, 30), at(2026, 10, 25, 3)]


def test_a_worker_starting_in_the_repeated_hour_catches_up_from_its_first_pass(db, define):
    with run_workflows(start=at(2026, 10, 24, 23, 50)) as env:
        define("repeated", ["*/30 * * * *"], "Europe/Paris", catch_up="all")
        Scheduler().run_due(env.now)
        env.clock.set(at(2026, 10, 25, 1, 10))  # 02:10 CET, the second pass; down since 01:50 CEST
        Scheduler().run_due(env.now)
        assert slots_of("repeated") == [at(2026, 10, 25, 0), at(2026, 10, 25, 0, 30)]
        assert Schedule.objects.get(workflow_name="repeated").next_slot == at(2026, 10, 25, 2)


# -- the worker's loop ---------------------------------------------------------------------------

def quiet_worker() -> Worker:
    """A worker whose sweep and retention are not due, so that a look runs the timers and the schedules
    alone."""
    worker = Worker(run_cluster=False)
    worker._last_sweep = worker._last_purge = time.monotonic()
    return worker


def test_an_idle_worker_asks_nothing_more_with_schedules_declared(env, define):
    baseline = quiet_worker()
    baseline.run_once()
    env.clock.advance(timedelta(seconds=1))
    with CaptureQueriesContext(connection) as ctx:
        baseline.run_once()
    without = statements(ctx)
    for n in range(10):
        define(f"daily-{n}", [f"{n} 9 * * *", f"{n} 21 * * *"], "Europe/Paris")
    worker = quiet_worker()
    worker.run_once()  # reads (and makes) the twenty schedules' rows once
    assert Schedule.objects.count() == 20
    env.clock.advance(timedelta(seconds=1))
    with CaptureQueriesContext(connection) as ctx:
        pause = worker.run_once()
    assert statements(ctx) == without  # the next wake time's read, as without schedules
    assert len(without) == 1
    assert 0 < pause <= (worker.scheduler.next_due - env.now).total_seconds()


def test_a_due_slot_costs_a_worker_that_does_not_create_it_one_statement(env, define):
    define("ticking", ["* * * * * *"])
    other = Scheduler()
    worker = quiet_worker()
    worker.run_once()
    other.run_due(env.now)
    env.clock.advance(timedelta(seconds=1))
    assert other.run_due(env.now) == 1  # the other worker was first
    with CaptureQueriesContext(connection) as ctx:
        pause = worker.run_once()
    [read] = statements(ctx)
    assert "django_workflows_schedule" in read
    assert 0 < pause <= 1.0
    # Its turn: the locked read, the instance, and the schedule moved on.
    env.clock.advance(timedelta(seconds=1))
    with CaptureQueriesContext(connection) as ctx:
        worker.run_once()
    sent = statements(ctx)
    assert [sql.split()[0] for sql in sent] == ["SELECT", "INSERT", "UPDATE"]
    assert slots_of("ticking") == [MONDAY + timedelta(seconds=1), MONDAY + timedelta(seconds=2)]


def test_a_timer_the_loop_slept_until_is_claimed_without_reading_it_again(env):
    from django_workflows.shared import changes

    worker = quiet_worker()
    # The database's own watcher (SQLite's files, PostgreSQL's LISTEN), which tells the loop of every
    # new wake time: built without a query, and not waited on here.
    worker.wake_watcher = changes.watcher(connection.alias, changes.WAKE_CHANNEL, 1.0)
    assert worker.wake_watcher.kind != "polling"
    sleeper = workflows.get("sleeper").create(params={})
    env.run_until_idle()
    with CaptureQueriesContext(connection) as ctx:
        worker.run_once()  # reads the wake time, an hour ahead: nothing is due
    assert len(statements(ctx)) == 1
    # A look before it comes (the sweep's, say) reads it again, as it always did: a notification lost
    # while the watcher reconnected costs no more than it did.
    env.clock.advance(timedelta(minutes=1))
    with CaptureQueriesContext(connection) as ctx:
        worker.run_once()
    assert len(statements(ctx)) == 1
    env.clock.advance(timedelta(minutes=59))
    with CaptureQueriesContext(connection) as ctx:
        worker.run_once()
    sent = statements(ctx)
    # The claim first: no read of the wake time before it. Then the next wake time, and the heartbeat.
    assert "AS due_0" in sent[0], sent
    assert len(sent) == 3, sent
    assert Instance.objects.get(pk=sleeper.pk).status == "queued"
    # A polling loop is told of nothing, and reads the wake time at every look, as before.
    polling = quiet_worker()
    polling.run_once()
    env.clock.advance(timedelta(seconds=1))
    with CaptureQueriesContext(connection) as ctx:
        polling.run_once()
    assert "AS due_0" not in statements(ctx)[0]


def test_the_qcluster_tick_creates_due_slots(env, define):
    define("ticked", ["* * * * *"])
    dispatch.tick()
    env.clock.advance(timedelta(minutes=1, seconds=30))  # a tick a minute, run late: still on time
    dispatch.tick()
    assert slots_of("ticked") == [at(2026, 3, 2, 7, 31)]


# -- the command line ----------------------------------------------------------------------------

def run_cli(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_cli_lists_each_schedule_with_its_zone_policy_and_next_slots(env, define):
    define("paris-mornings", ["0 9 * * mon-fri", "30 18 * * fri"], "Europe/Paris", catch_up="all")
    define("every-ten", ["*/10 * * * * *"])
    text = run_cli("schedules")
    lines = text.splitlines()
    assert lines[0].split() == ["WORKFLOW", "CRON", "TIMEZONE", "CATCH-UP", "NEXT", "SLOTS", "WORKERS"]
    assert lines[1].startswith("every-ten") and "*/10 * * * * *" in lines[1] and "UTC" in lines[1]
    assert "2026-03-02 07:30:10 UTC, 2026-03-02 07:30:20 UTC, 2026-03-02 07:30:30 UTC" in lines[1]
    assert "no worker has run it yet" in lines[1]
    assert "0 9 * * mon-fri" in lines[2] and "Europe/Paris" in lines[2] and " all " in lines[2]
    assert "2026-03-02 09:00:00 CET, 2026-03-03 09:00:00 CET, 2026-03-04 09:00:00 CET" in lines[2]
    assert "30 18 * * fri" in lines[3] and "2026-03-06 18:30:00 CET" in lines[3]

    listed = json.loads(run_cli("schedules", "paris-mornings", "--count", "2", "--json"))
    key = schedule_key("0 9 * * mon-fri", "Europe/Paris")
    assert listed[0] == {"workflow": "paris-mornings", "cron": "0 9 * * mon-fri", "timezone": "Europe/Paris",
                         "catch_up": "all", "id_prefix": f"cron-{key}-",
                         "next": ["2026-03-02T08:00:00+00:00", "2026-03-03T08:00:00+00:00"],
                         "stored_next_slot": None, "last_slot": None, "error": None}
    assert [entry["cron"] for entry in listed] == ["0 9 * * mon-fri", "30 18 * * fri"]

    # Once a worker has created a slot, the listing says which.
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    env.clock.set(at(2026, 3, 2, 8, 0, 1))
    scheduler.run_due(env.now)
    listed = json.loads(run_cli("schedules", "--json"))
    [morning] = [entry for entry in listed if entry["cron"] == "0 9 * * mon-fri"]
    assert morning["last_slot"] == "2026-03-02T08:00:00+00:00"
    assert morning["stored_next_slot"] == "2026-03-03T08:00:00+00:00"
    assert "last 2026-03-02T08:00:00Z" in run_cli("schedules", "paris-mornings")


def test_the_api_and_the_admin_show_each_schedule_with_its_next_slots(env, define, admin_client):
    from django.urls import reverse

    define("paris-mornings", ["0 9 * * mon-fri"], "Europe/Paris", catch_up="all")
    define("broken", ["0 25 * * *"])
    scheduler = Scheduler()
    scheduler.run_due(env.now)
    env.clock.set(at(2026, 3, 2, 8, 0, 1))
    scheduler.run_due(env.now)

    key = schedule_key("0 9 * * mon-fri", "Europe/Paris")
    [morning] = admin_client.get("/workflows/paris-mornings/").json()["schedules"]
    assert morning == {"cron": "0 9 * * mon-fri", "timezone": "Europe/Paris", "catch_up": "all",
                       "id_prefix": f"cron-{key}-",
                       "next": ["2026-03-03T08:00:00Z", "2026-03-04T08:00:00Z", "2026-03-05T08:00:00Z"],
                       "last_slot": "2026-03-02T08:00:00Z", "error": None}
    listed = {w["name"]: w["schedules"] for w in admin_client.get("/workflows/").json()}
    assert listed["three-steps"] == []
    [broken] = listed["broken"]
    assert broken["next"] == [] and broken["error"] and "0 25 * * *" in broken["error"]

    page = admin_client.get(reverse("admin:django_workflows_instance_workflow",
                                    args=["paris-mornings"])).content.decode()
    assert ("Schedule <code>0 9 * * mon-fri</code> (Europe/Paris, catch-up: all); next "
            '<time datetime="2026-03-03T08:00:00+00:00">Tue 3 Mar 2026 09:00:00 CET</time>') in page
    assert 'last created <time datetime="2026-03-02T08:00:00+00:00">Mon 2 Mar 2026 09:00:00 CET</time>' in page
    page = admin_client.get(reverse("admin:django_workflows_instance_workflow", args=["broken"])).content.decode()
    assert 'Schedule <code>0 25 * * *</code> (UTC, catch-up: ' in page and "not run</strong>" in page

    described = run_cli("describe", "paris-mornings")
    assert "Schedule" in described and "0 9 * * mon-fri (Europe/Paris), next 2026-03-03 09:00:00 CET" in described
    assert json.loads(run_cli("describe", "paris-mornings", "--json"))["schedules"][0]["next"][0] == \
        "2026-03-03T08:00:00+00:00"
    assert "0 25 * * * (UTC): not run" in run_cli("describe", "broken")


def test_the_cli_without_schedules_and_for_an_unknown_workflow(env):
    assert run_cli("schedules").startswith("No workflow declares schedules.")
    assert run_cli("schedules", "three-steps").startswith("No workflow declares schedules.")
    with pytest.raises(CommandError, match="No workflow named 'no-such'"):
        run_cli("schedules", "no-such")


def test_the_cli_shows_a_schedule_it_cannot_run_with_why(env, define):
    define("broken", ["0 25 * * *"])
    text = run_cli("schedules")
    assert "(not run: see below)" in text and "broken '0 25 * * *'" in text and "croniter" in text


# -- system checks -------------------------------------------------------------------------------

def check_ids(cls) -> list[str]:
    return sorted(message.id for message in WorkflowOptions.of(cls).problems)


def test_valid_schedules_pass_every_check(db, define):
    define("fine", ["0 9 * * mon-fri", "*/5 * * * * *", "@daily"], "Europe/Paris", catch_up="none")
    assert checks.check_workflows() == []
    call_command("check", "--fail-level", "WARNING")


@pytest.mark.parametrize("schedules", [
    ["61 * * * *"],                    # a minute that does not exist
    ["* * * * * * *"],                 # seven fields (a year)
    ["0 9 30 2 *"],                    # 30 February: never
    ["0 9 * * mon", "0  9 * * MON"],   # the same expression twice
    [42],                              # not a string
    ["@fortnightly"],                  # no such alias
    "",                                # empty: no schedule, no problem (checked below)
])
def test_e020_expressions(db, define, schedules):
    cls = define("bad-cron", schedules)
    assert check_ids(cls) == ([] if schedules == "" else ["django_workflows.E021"])
    options = WorkflowOptions.of(cls)
    if len(schedules) == 2:
        assert len(options.schedules) == 1  # the worker runs a repeated expression once
    elif schedules:
        assert options.schedules == [] and options.schedules_refused  # the worker runs none of them


def test_e020_stops_manage_py_check_and_the_worker_runs_the_other_schedules(env, define, caplog):
    define("bad-minute", ["61 * * * *"])
    define("good-minute", ["* * * * *"])
    with pytest.raises(SystemCheckError, match="E021"):
        call_command("check")
    scheduler = Scheduler()
    with caplog.at_level(logging.ERROR, logger="django_workflows.schedules"):
        scheduler.run_due(env.now)
    assert "Schedules not run: bad-minute" in caplog.text
    assert list(Schedule.objects.values_list("workflow_name", flat=True)) == ["good-minute"]


def test_e021_time_zone_and_e022_catch_up(db, define):
    assert check_ids(define("bad-zone", ["0 9 * * *"], "Mars/Olympus_Mons")) == ["django_workflows.E022"]
    assert check_ids(define("bad-policy", ["0 9 * * *"], catch_up="everything")) == ["django_workflows.E023"]
    refused = WorkflowOptions.of(registry.get("bad-zone"))
    assert refused.schedules == [] and "Mars/Olympus_Mons" in refused.schedules_refused


def test_e023_schedules_without_croniter_say_which_extra_to_install(env, define, monkeypatch, caplog):
    cls = define("no-croniter", ["0 9 * * *"])
    monkeypatch.setitem(sys.modules, "croniter", None)  # as if the [cron] extra were not installed
    [message] = WorkflowOptions.of(cls).problems
    assert message.id == "django_workflows.E024"
    assert "pip install 'django-durable-workflows[cron]'" in message.msg
    with caplog.at_level(logging.ERROR, logger="django_workflows.schedules"):
        assert Scheduler().run_due(env.now) == 0
    assert "django-durable-workflows[cron]" in caplog.text and not Schedule.objects.exists()
    with pytest.raises(CommandError, match=r"django-durable-workflows\[cron\]"):
        run_cli("schedules")
