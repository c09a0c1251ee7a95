"""Chaos: 500 instances of a mix of workflows (steps, retries, sleeps, events, and one in 25 with a step
longer than the cluster watch's WEDGE_SECONDS) run through real
``workflows_worker`` commands while a random process of theirs is SIGKILLed every 0.5 to 2 seconds,
and, on PostgreSQL, the database server is restarted once mid-run, a random worker connection is cut
(``pg_terminate_backend``) every 1 to 3 seconds, and the second worker command runs with its clock 90 s
ahead (libfaketime).

Afterwards every instance is complete with its expected output; each step has one journal row;
every step body ran once per journaled attempt, and any extra run was cut short: its process died
before the step ran again, or the database restart or a cut connection failed its journal write; no
step ran after its
result was journaled; every event was consumed exactly once; no replay of an instance started
before the previous one had let go of it (released its lease, or counted it lapsed unrenewed) or its
process had died; no replay started a step body after it said it let go; and every process read the database's
clock to within CLOCK_TOLERANCE.

The worker processes write what they do (step body runs, replays) to files, not to the database,
so that the restart cannot lose a record; a watch over /proc notes when each process was last seen
alive, whoever killed it.

``make chaos`` runs it twice, and ``make test`` never (the ``chaos`` marker is deselected unless
``-m`` names it): on SQLite with the ORM broker and one worker command, then on a private
PostgreSQL server (tests/chaos_postgres.sh, which the test restarts) with the Redis broker and two
worker commands, one of them skewed. ``CHAOS_SEED`` replays a run's plan (which instance does what, which of its events
are sent early, the intervals between kills and which process each picks); ``CHAOS_INSTANCES``
changes its size.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from django_workflows import workflows
from django_workflows.shared import processes
from django_workflows.models import Event, Instance, Step, StepKind, WorkerHeartbeat
from tests.testapp.chaos import (
    EVENT_TYPE,
    LOG_DIR_VARIABLE,
    PLANNED_FAILURE,
    SKEW_VARIABLE,
    expected_output,
    expected_step_keys,
    read_logs,
)
from tests.workers import FAST_RECOVERY, WorkerProcess

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

INSTANCES = int(os.environ.get("CHAOS_INSTANCES", "500"))
WORKFLOW = "chaos-mix"
# Kills stop once every instance is complete and at least MIN_KILLS have landed, or after this long;
# then the instances get SETTLE seconds more, with no kills, to finish. A quiet machine needs neither;
# a busy one needs both. A fast one finishes the work before MIN_KILLS: the kills go on, and the
# instances must stay complete through them.
CHAOS_SECONDS = 90
MIN_KILLS = 10
SETTLE_SECONDS = 90
# A third of the instances complete, or this many seconds pass: then the database is restarted.
RESTART_AT_SECONDS = 20
DATABASE_DOWN_SECONDS = 2.0
# On PostgreSQL, the second worker command's clock runs this far ahead (libfaketime; the monotonic
# clock left alone): leases, wake times and deadlines must come from the database's clock.
SKEW_SECONDS = 90
# Random kills may hit one instance's replays many times in a row; parking it would lose it.
WORKER_SETTINGS = {**FAST_RECOVERY, "POISON_LIMIT": 50}
# One instance in this many has a step longer than WEDGE_SECONDS (4 s): a cluster busy with such steps
# must neither be restarted as wedged nor have them parked as poison.
LONG_STEP_EVERY = 25
DATABASE_ERRORS = ("OperationalError", "InterfaceError", "DatabaseError")
# A command is spared from its start until its cluster runs (or this long): while it starts it is the
# only process of its tree, and killing it again and again would measure Django's start-up time, not
# recovery. Once up, any of its processes may die, during a cluster restart too.
START_GRACE_SECONDS = 15.0


# -- the worker processes and the kills -----------------------------------------------------------

def process_table() -> dict[int, tuple[int, int]]:
    """{pid: (parent pid, session id)} of every live process, from /proc; zombies left out."""
    return {pid: (int(fields[processes.PARENT]), int(fields[processes.SESSION]))
            for pid, fields in processes.process_table().items() if fields[processes.STATE] not in processes.EXITED}


def session_of(command_pid: int, table) -> set[int]:
    """A worker command runs in a session of its own (start_new_session): its whole tree, and
    whatever of that tree outlived its parent."""
    return {pid for pid, (_, session) in table.items() if session == command_pid}


@dataclass
class Kill:
    at: float
    pid: int
    kind: str


@dataclass
class Life:
    """When the watch saw a worker process: first and last alive, and first gone (dead or a zombie)."""

    kind: str
    first: float
    last: float
    gone: float | None = None


class ProcessWatch:
    """Polls /proc every 0.1 s for the processes of the worker commands' sessions and notes when each
    was last seen alive and first seen gone, whoever killed it: the kill loop, the kernel with its
    parent (a cluster dies with its sentinel), or a command restarting its wedged cluster."""

    INTERVAL = 0.1

    def __init__(self, sessions: set[int]):
        self.sessions = sessions
        self.lives: dict[int, Life] = {}
        self.foreign: set[int] = set()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="process-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)
        self.poll()

    def _loop(self) -> None:
        while not self.stop_event.wait(self.INTERVAL):
            self.poll()

    def poll(self) -> None:
        now = time.time()
        present = set(processes.process_ids())
        self.foreign &= present  # a pid that ended may come back as one of ours
        for pid in present - self.foreign:
            life = self.lives.get(pid)
            if life is not None and life.gone is not None:
                continue
            try:
                fields = processes.stat_fields(pid)
            except OSError:
                continue
            session = int(fields[processes.SESSION])
            if session not in self.sessions:
                if pid != session:  # a command just started may not be in sessions yet
                    self.foreign.add(pid)
                continue
            if life is None:
                life = self.lives[pid] = Life("", now, now)
            if fields[processes.STATE] in processes.EXITED:
                life.gone = now
            else:
                life.last = now
        for pid, life in self.lives.items():
            if life.gone is None and pid not in present:
                life.gone = now


@dataclass
class Chaos:
    """Runs the worker commands and, every 0.5 to 2 seconds, SIGKILLs one process of theirs at random."""

    rng: random.Random
    log_dir: Path  # the commands' output
    marker_dir: Path  # where django-q2 workers mark themselves (TEST_CHAOS_LOG_DIR)
    broker: str
    commands: int
    workers: list[WorkerProcess] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    restarts: int = 0
    exited: list[str] = field(default_factory=list)  # commands that ended without being killed
    exited_database_down: int = 0
    database_restarted: bool = False
    left_behind: list[str] = field(default_factory=list)
    forced_stops: int = 0
    sessions: set[int] = field(default_factory=set)
    skewed_slots: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    started: int = 0
    stopped_at: float = float("inf")

    def __post_init__(self):
        self.watch = ProcessWatch(self.sessions)

    def start_command(self, slot: int) -> WorkerProcess:
        self.started += 1
        env = skewed_env() if slot in self.skewed_slots else {}
        worker = WorkerProcess(self.log_dir, broker=self.broker, workers=2, name=f"command-{self.started}",
                               settings=WORKER_SETTINGS, env=env).start()
        worker.started_at = time.monotonic()
        worker.up = False
        self.sessions.add(worker.pid)
        return worker

    def start(self) -> None:
        self.watch.start()
        self.workers = [self.start_command(slot) for slot in range(self.commands)]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="chaos", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)

    def _loop(self) -> None:
        try:
            while not self.stop_event.wait(self.rng.uniform(0.5, 2.0)):
                self.kill_one()
        except Exception as exc:  # reported by the test, which cannot see this thread's exceptions
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def kind(self, pid: int, worker: WorkerProcess, table, members: set[int]) -> str:
        parent = table[pid][0]
        if pid == worker.pid:
            return "command"
        if parent == worker.pid:
            kind = "sentinel"
        elif (self.marker_dir / f"q2-worker-{pid}").exists():
            kind = "worker"
        else:
            kind = "pusher or monitor"
        return kind if parent in members else f"orphaned {kind}"

    def kill_one(self) -> None:
        for slot, worker in enumerate(self.workers):
            if worker.process.poll() is not None:
                output = worker.output()
                if self.database_restarted and "OperationalError" in output[-3000:]:
                    # It could not reach the database while starting, as a process started during
                    # the restart would not: its supervisor (here, this loop) starts it again.
                    self.exited_database_down += 1
                else:
                    self.exited.append(f"{worker.log_path.name} exited with {worker.process.returncode}:\n"
                                       f"{output[-1500:]}")
                self.replace(slot)
        table = process_table()
        candidates = []
        for slot, worker in enumerate(self.workers):
            members = session_of(worker.pid, table)
            # Up: the command, its sentinel, and the sentinel's first processes.
            starting_for = time.monotonic() - worker.started_at
            worker.up = worker.up or len(members) >= 4 or starting_for > START_GRACE_SECONDS
            if not worker.up:
                continue
            for pid in sorted(members):
                kind = self.kind(pid, worker, table, members)
                candidates.append((slot, pid, kind))
                if pid in self.watch.lives:
                    self.watch.lives[pid].kind = kind
        if not candidates:
            return
        slot, pid, kind = self.rng.choice(candidates)
        at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.kills.append(Kill(at, pid, kind))
        if kind == "command":
            self.replace(slot)

    def replace(self, slot: int) -> None:
        """The command is dead: anything of its tree still alive after a moment was left behind by it
        (and is killed now, as its container's end would); then a new command takes its place."""
        old = self.workers[slot]
        old.process.wait(10)
        old.log.close()
        deadline = time.monotonic() + 2
        while session_of(old.pid, process_table()) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.collect_left_behind(old.pid, "after its command was killed")
        self.workers[slot] = self.start_command(slot)
        self.restarts += 1

    def collect_left_behind(self, session: int, when: str) -> None:
        table = process_table()
        for pid in session_of(session, table):
            self.left_behind.append(f"pid {pid} (parent {table[pid][0]}) {when}")
        try:
            os.killpg(session, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def shut_down(self) -> None:
        """Stop every command gracefully; nothing of any worker tree may outlive it."""
        self.stopped_at = time.time()
        for worker in self.workers:
            worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 8
        for worker in self.workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # A cluster wedged by a process killed while it held a lock of the task queue
                # (django-q2 issue #23) does not stop by itself: its command is SIGKILLed with it.
                worker.kill_all()
                self.forced_stops += 1
            worker.log.close()
        deadline = time.monotonic() + 5
        while any(session_of(s, process_table()) for s in self.sessions) and time.monotonic() < deadline:
            time.sleep(0.1)
        for session in self.sessions:
            self.collect_left_behind(session, "after the commands stopped")
        self.watch.stop()


def skewed_env() -> dict:
    """A worker command whose clock runs SKEW_SECONDS ahead (see tests/system/test_clock_skew.py)."""
    from tests.system.test_clock_skew import skewed_env as faketime_env

    return {**faketime_env(f"+{SKEW_SECONDS}s"), SKEW_VARIABLE: str(SKEW_SECONDS)}


# -- connections cut -----------------------------------------------------------------------------

class ConnectionKiller:
    """Every 1 to 3 seconds, terminates one connection of a worker process (``pg_terminate_backend``
    from a connection of its own): a failover or a proxy dropping a connection, mid-statement or idle."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.kills: list[tuple[float, int]] = []  # (when, the worker process whose connection it was)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="connection-killer", daemon=True)
        self.url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)

    def _loop(self) -> None:
        import psycopg

        while not self.stop_event.wait(self.rng.uniform(1.0, 3.0)):
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=3) as killer:
                    backends = killer.execute(
                        "SELECT pid, application_name FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name LIKE 'chaos-%%'"
                    ).fetchall()
                    if not backends:
                        continue
                    backend, name = self.rng.choice(sorted(backends))
                    at = time.time()
                    if killer.execute("SELECT pg_terminate_backend(%s)", [backend]).fetchone()[0]:
                        self.kills.append((at, int(name.removeprefix("chaos-"))))
            except psycopg.Error:
                continue  # the database is restarting


# -- the database restart ------------------------------------------------------------------------

class PostgresRestart:
    """Stops the private PostgreSQL server (fast: connections are cut), waits, starts it again."""

    def __init__(self):
        self.data = os.environ["CHAOS_PGDATA"]
        self.bin = os.environ.get("CHAOS_PG_BIN", "")
        self.down_at: float | None = None
        self.up_at: float | None = None
        self.thread: threading.Thread | None = None
        self.error: str | None = None

    def pg_ctl(self, *args) -> None:
        command = [os.path.join(self.bin, "pg_ctl"), "-D", self.data, *args]
        if os.getuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def begin(self) -> None:
        self.thread = threading.Thread(target=self._restart, name="postgres-restart", daemon=True)
        self.thread.start()

    def _restart(self) -> None:
        try:
            self.down_at = time.time()
            self.pg_ctl("stop", "-m", "fast", "-w")
            time.sleep(DATABASE_DOWN_SECONDS)
            self.pg_ctl("start", "-w", "-l", os.path.join(self.data, "server.log"))
            self.up_at = time.time()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    @property
    def done(self) -> bool:
        return self.up_at is not None or self.error is not None


# -- the plan -------------------------------------------------------------------------------------

@dataclass
class Planned:
    instance_id: str
    params: dict
    # One per event, in sending order: an early event is sent at once (it waits in the inbox until
    # the instance reaches its wait), a late one when the instance is seen waiting for it.
    early: list[bool]
    pk: int | None = None
    sent: int = 0


def make_plan(rng: random.Random) -> list[Planned]:
    plan = []
    for n in range(INSTANCES):
        params = {
            "steps": rng.randint(1, 4),
            "failures": rng.choice([0, 0, 1, 2]),
            "sleep": rng.choice([0, 1, 2, 3]),
            "events": rng.choice([0, 1, 1, 2, 3]),
            "busy_ms": rng.choice([0, 2, 10]),
        }
        if n % LONG_STEP_EVERY == 0:
            # The long-step cohort: spread through the creation order, so that every task of a batch
            # meets one, and the workers of a cluster are often all inside one at once.
            params["long_ms"] = rng.choice([4500, 6000])
        early = [rng.random() < 0.4 for _ in range(params["events"])]
        plan.append(Planned(f"chaos-{n:04d}", params, early))
    return plan


# -- the test -------------------------------------------------------------------------------------

@pytest.fixture
def redis_broker(settings, monkeypatch):
    """This process's django-q2 on the Redis broker too, since it enqueues replays (create, events)."""
    import redis
    from django_q.conf import Conf

    db = int(os.environ.get("TEST_REDIS_DB", "8"))
    monkeypatch.setenv("TEST_REDIS_DB", str(db))
    redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()
    conf = {"host": "127.0.0.1", "port": 6379, "db": db}
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "REDIS", conf)
    settings.Q_CLUSTER = {**{k: v for k, v in settings.Q_CLUSTER.items() if k != "orm"}, "redis": conf}


def database_call(fn, *args, **kwargs):
    """Run ``fn`` against the database; during the restart, return None instead of failing."""
    try:
        return fn(*args, **kwargs)
    except (OperationalError, InterfaceError):
        close_old_connections()
        connection.close()
        return None


def test_chaos(tmp_path, request, monkeypatch):
    postgres = connection.vendor == "postgresql"
    if postgres and not os.environ.get("CHAOS_PGDATA"):
        pytest.skip("the PostgreSQL chaos test restarts its server: run it through `make chaos`, which "
                    "starts a private one (tests/chaos_postgres.sh)")
    if postgres:
        request.getfixturevalue("redis_broker")
        # Persistent connections, as in production: each must recover from the restart cutting it.
        monkeypatch.setenv("TEST_CONN_MAX_AGE", "60")
    # This process enqueues thousands of replays: django-q2's line for each would drown the figures.
    from django_q.conf import logger as q_logger

    request.addfinalizer(lambda level=q_logger.level: q_logger.setLevel(level))
    q_logger.setLevel(logging.WARNING)
    seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(10**9))
    rng = random.Random(seed)
    setup = ("PostgreSQL, Redis broker, two worker commands, one database restart" if postgres
             else "SQLite, ORM broker, one worker command")
    print(f"\n== chaos: {INSTANCES} instances on {setup}; CHAOS_SEED={seed}", flush=True)

    log_dir = tmp_path / "chaos-log"
    log_dir.mkdir()
    monkeypatch.setenv(LOG_DIR_VARIABLE, str(log_dir))
    plan = make_plan(rng)
    chaos = Chaos(rng=random.Random(rng.random()), log_dir=tmp_path, marker_dir=log_dir,
                  broker="redis" if postgres else "orm", commands=2 if postgres else 1)
    if postgres:
        chaos.skewed_slots = {1}
    restart = PostgresRestart() if postgres else None
    cuts = ConnectionKiller(random.Random(rng.random())) if postgres else None
    began = time.monotonic()
    heartbeats: list[int] = []
    settled, unsettled = False, Counter()
    events_sent = 0
    try:
        chaos.start()
        if cuts:
            cuts.start()
        handle = workflows.get(WORKFLOW)
        for first in range(0, len(plan), 100):
            chunk = plan[first:first + 100]
            for planned, created in zip(chunk, handle.create_batch(
                    [{"id": p.instance_id, "params": p.params} for p in chunk])):
                planned.pk = created.pk
        started = time.time()
        events_sent = drive(plan, chaos, restart, started)
        if cuts:
            cuts.stop()
        settled, unsettled = wait_until_settled(plan)
    finally:
        if cuts:
            cuts.stop()
        if chaos.workers:
            chaos.stop()
            heartbeats = database_call(lambda: list(WorkerHeartbeat.objects.values_list("cluster_restarts",
                                                                                        flat=True))) or []
            chaos.shut_down()
        if restart and restart.thread:
            restart.thread.join(60)
    elapsed = time.monotonic() - began
    if not settled:
        for worker in chaos.workers:
            print(f"--- {worker.log_path.name}\n{worker.output()}")

    report = check(plan, chaos, restart, cuts, log_dir, postgres)
    print_figures(setup, seed, elapsed, chaos, restart, cuts, heartbeats, events_sent, report)

    assert not chaos.errors, chaos.errors
    assert not chaos.exited, "\n".join(chaos.exited)
    assert restart is None or restart.error is None, restart.error
    assert settled, f"not every instance finished in time: {dict(unsettled)}"
    assert not report["problems"], "\n".join(report["problems"][:40])
    assert not chaos.left_behind, chaos.left_behind[:20]
    assert len(chaos.kills) >= MIN_KILLS, "too few kills to call it chaos"
    assert restart is None or restart.up_at is not None
    assert cuts is None or len(cuts.kills) >= 10, "too few connections cut"


def print_figures(setup, seed, elapsed, chaos: Chaos, restart, cuts, heartbeats, events_sent, report) -> None:
    kinds = Counter(kill.kind for kill in chaos.kills)
    down = f" (down {restart.up_at - restart.down_at:.1f} s)" if restart and restart.up_at else ""
    lines = [
        ("instances", f"{INSTANCES}: {report['mix']}"),
        ("wall time", f"{elapsed:.0f} s, {report['run_seconds']:.0f} s from the first instance created to "
                      "the last one complete"),
        ("kills", f"{len(chaos.kills)}: " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())),
        ("", f"{report['deaths']} worker processes died in all (with their parent, or in a cluster restart)"),
        ("worker restarts", f"{chaos.restarts} commands started again, {chaos.exited_database_down} of them "
                            "after exiting unable to reach the database while starting"),
        ("", f"{sum(heartbeats)} cluster restarts by the commands' watch, {wedged_restarts(chaos)} of them "
             "for a cluster seen wedged"),
        ("database restarts", f"{1 if restart and restart.up_at else 0}{down}"),
        ("connections cut", f"{len(cuts.kills) if cuts else 0}"),
        ("clock skew", f"command slot 2 runs {SKEW_SECONDS} s ahead" if chaos.skewed_slots else "none"),
        ("events", f"{events_sent} sent, {report['consumed']} consumed once each, "
                   f"{report['buffered']} of them sent before their wait was reached"),
        ("step bodies", f"{report['runs']} runs for {report['attempts']} journaled attempts of "
                        f"{report['steps']} steps"),
        ("ran again", f"{report['reruns_kill']} cut short by a kill, {report['reruns_database']} by the "
                      f"database restart, {report['reruns_connection']} by a cut connection; "
                      f"{report['database_attempts']} attempts failed by the restart or a cut connection"),
        ("replays", f"{report['replays']}, {report['replays_killed']} died with their process, "
                    f"{report['overlaps']} overlapping, {report['lapsed']} leases lapsed unrenewed"),
        ("", f"their processes' database clock off by at most {report['clock_error'] * 1000:.1f} ms "
             f"({report['clock_readings']} replays)"),
        ("", f"{report['unseen']} worker processes lived too briefly for the watch to see them"),
        ("left behind", f"{len(chaos.left_behind)} processes outlived their command or sentinel; "
                        f"{chaos.forced_stops} commands had to be killed at the end"),
    ]
    print(f"\n== chaos figures ({setup}; CHAOS_SEED={seed})")
    for label, text in lines:
        print(f"   {label + ':' if label else '':19} {text}")
    print(flush=True)


def wedged_restarts(chaos: Chaos) -> int:
    """How many times a command restarted its cluster as wedged (its log says so each time)."""
    return sum(path.read_text(errors="replace").count("took no task")
               for path in chaos.log_dir.glob("command-*.log"))


def status_counts() -> Counter:
    rows = database_call(lambda: list(Instance.objects.filter(workflow_name=WORKFLOW).values_list("status",
                                                                                                  flat=True)))
    return Counter(rows or [])


def drive(plan: list[Planned], chaos: Chaos, restart: PostgresRestart | None, started: float) -> int:
    """Send the events when their time comes and restart the database once; return when every
    instance is complete (or time is up), the kills going on throughout."""
    handles = {p.instance_id: workflows.get(WORKFLOW).get(p.instance_id) for p in plan}
    pending = [p for p in plan if p.early]
    sent = 0
    last_report = 0.0
    while True:
        elapsed = time.time() - started
        waiting = database_call(lambda: {
            pk for pk, types in Instance.objects.filter(workflow_name=WORKFLOW, status="waiting")
            .values_list("pk", "waiting_for") if types and EVENT_TYPE in types
        }) or set()
        for planned in pending:
            while planned.sent < len(planned.early) and (
                    planned.early[planned.sent] or planned.pk in waiting):
                if not send_once(handles[planned.instance_id], planned):
                    break
                planned.sent += 1
                sent += 1
                waiting.discard(planned.pk)
        pending = [p for p in pending if p.sent < len(p.early)]
        counts = status_counts()
        complete = counts.get("complete", 0)
        mid_run = complete >= len(plan) / 3 or elapsed >= RESTART_AT_SECONDS
        if restart and restart.thread is None and mid_run:
            print(f"   {elapsed:5.1f} s: restarting PostgreSQL", flush=True)
            chaos.database_restarted = True
            restart.begin()
        if elapsed - last_report >= 10:
            last_report = elapsed
            print(f"   {elapsed:5.1f} s: {dict(counts)}, {len(chaos.kills)} kills, {sent} events sent",
                  flush=True)
        restarted = restart is None or restart.done
        if complete == len(plan) and not pending and restarted and len(chaos.kills) >= MIN_KILLS:
            break
        if elapsed >= CHAOS_SECONDS and restarted:
            print(f"   {elapsed:5.1f} s: time is up for the kills: {dict(counts)}", flush=True)
            break
        time.sleep(0.5)
    chaos.stop()
    # Whatever is left to send goes now.
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for planned in pending:
            while planned.sent < len(planned.early) and send_once(handles[planned.instance_id], planned):
                planned.sent += 1
                sent += 1
        pending = [p for p in pending if p.sent < len(p.early)]
    return sent


def send_once(handle, planned: Planned) -> bool:
    """Send the instance's next event. A send that failed with the database down may have committed
    or not: look before sending it again, so that the test never sends an event twice itself."""
    payload = {"instance": planned.instance_id, "n": planned.sent}

    def send():
        if Event.objects.filter(instance_id=planned.pk, type=EVENT_TYPE, payload=payload).exists():
            return True
        handle.send_event(type=EVENT_TYPE, payload=payload, sender="chaos")
        return True

    return bool(database_call(send))


def wait_until_settled(plan) -> tuple[bool, Counter]:
    """Whether every instance completed within SETTLE_SECONDS, and the statuses at the end."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        counts = status_counts()
        if counts.get("complete", 0) == len(plan):
            return True, counts
        if time.monotonic() >= deadline:
            return False, counts
        time.sleep(0.5)


# -- the checks -----------------------------------------------------------------------------------

def timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


# How far a journaled attempt's time may be from its body's own record. The journal's times are the
# database's clock as the worker last read it (carried by its monotonic clock, off by up to half the
# reading's round trip: milliseconds on a loaded machine); a body run is stamped with the process's own
# clock (corrected by the skew it was given). Attempts of one step are at least a second apart.
CLOCK_TOLERANCE = 0.05


def check(plan: list[Planned], chaos: Chaos, restart: PostgresRestart | None, cuts: ConnectionKiller | None,
          log_dir: Path,
          postgres: bool) -> dict:
    problems: list[str] = []
    by_pk = {p.pk: p for p in plan}
    instances = {row["pk"]: row for row in Instance.objects.filter(workflow_name=WORKFLOW).values(
        "pk", "instance_id", "status", "output", "created_at", "ended_at")}
    steps: dict[int, list[dict]] = defaultdict(list)
    for row in Step.objects.filter(instance_id__in=by_pk).values(
            "id", "instance_id", "key", "kind", "status", "attempts", "started_at"):
        steps[row["instance_id"]].append(row)
    events: dict[int, list[dict]] = defaultdict(list)
    for row in Event.objects.filter(instance_id__in=by_pk).values(
            "instance_id", "type", "payload", "received_at", "consumed_by"):
        events[row["instance_id"]].append(row)

    records = read_logs(log_dir)
    lives = chaos.watch.lives
    unseen: set[int] = set()
    # The database was unreachable from its stop until it was back, and a connection it cut fails
    # on its next use: a step body that ran around then may have lost its journal write.
    outage = (restart.down_at - 5, restart.up_at + 1) if restart and restart.up_at else None

    def life(pid: int) -> Life:
        if pid not in lives:
            # Born and gone between two looks of the watch: alive at least until its last record.
            unseen.add(pid)
            last = max((r[4] for r in records if r[0] in ("run", "replay") and r[3] == pid), default=0.0)
            lives[pid] = Life("unseen", last, last, last)
        return lives[pid]

    def whois(pid: int) -> str:
        found = life(pid)
        gone = f"gone by {found.gone:.3f}" if found.gone else "still alive"
        return (f"pid {pid} ({found.kind or 'worker process'}, seen alive {found.first:.3f} to "
                f"{found.last:.3f}, {gone})")

    def describe(replay: dict) -> str:
        released = "never released" if replay["released"] is None else f"released at {replay['released']:.3f}"
        if replay.get("lapsed") is not None:
            released += f", its lease lapsed at {replay['lapsed']:.3f}"
        error = "unknown" if replay["clock_error"] is None else f"{replay['clock_error'] * 1000:+.1f} ms"
        return (f"the replay started at {replay['started']:.3f} in {whois(replay['pid'])}, {released} "
                f"({replay['outcome']}), its process's database clock off by {error}")

    def connection_cut_near(pid: int, began: float, finished: float | None) -> bool:
        # The journal write follows the body's end within milliseconds; a connection cut before that,
        # since the replay's last statement (its take, or the previous step's write), fails it. A body of
        # the long cohort runs for seconds: a cut anywhere while it ran fails the write that follows it.
        end = began if finished is None else finished
        return cuts is not None and any(who == pid and began - 2 <= at <= end + 2 for at, who in cuts.kills)

    def died_before(pid: int, moment: float) -> bool:
        found = life(pid)
        return found.gone is not None and found.last < moment

    # Instances, journal, inbox.
    mix = Counter()
    database_attempts = 0
    attempts_total = 0
    step_rows = 0
    consumed = buffered = 0
    journaled_attempts: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for pk, planned in by_pk.items():
        row = instances.get(pk)
        name = planned.instance_id
        for key in ("steps", "failures", "events"):
            mix[key] += planned.params[key]
        if row is None:
            problems.append(f"{name}: missing")
            continue
        if row["status"] != "complete":
            problems.append(f"{name}: {row['status']}")
            continue
        expected = expected_output(name, planned.params)
        if row["output"] != expected:
            problems.append(f"{name}: output {row['output']!r}, expected {expected!r}")
        rows = steps[pk]
        step_rows += len(rows)
        keys = [r["key"] for r in rows]
        if len(keys) != len(set(keys)) or set(keys) != expected_step_keys(planned.params):
            problems.append(f"{name}: journal keys {sorted(keys)}, "
                            f"expected {sorted(expected_step_keys(planned.params))}")
        for r in rows:
            if r["status"] != "succeeded":
                problems.append(f"{name}: step {r['key']} is {r['status']}")
            if r["kind"] != StepKind.DO:
                continue
            attempts = r["attempts"]
            attempts_total += len(attempts)
            journaled_attempts[(name, r["key"])] = [
                (timestamp(a["start"]), timestamp(a["end"])) for a in attempts]
            if not attempts or not attempts[-1]["success"]:
                problems.append(f"{name}: step {r['key']} has no successful last attempt: {attempts}")
                continue
            planned_failures = 0
            for attempt in attempts[:-1]:
                error = attempt.get("error") or {}
                if PLANNED_FAILURE in error.get("message", ""):
                    planned_failures += 1
                elif postgres and error.get("name") in DATABASE_ERRORS:
                    database_attempts += 1
                else:
                    problems.append(f"{name}: step {r['key']} attempt {attempt['attempt']} failed: {error}")
            wanted = planned.params["failures"] if r["key"] == "flaky-1" else 0
            if planned_failures != wanted:
                problems.append(f"{name}: step {r['key']} failed {planned_failures} times as planned, "
                                f"not {wanted}")
        inbox = events[pk]
        if len(inbox) != planned.params["events"]:
            problems.append(f"{name}: {len(inbox)} events in the inbox, {planned.params['events']} sent")
        waits = {r["id"]: r for r in rows if r["kind"] == StepKind.WAIT}
        consumers = [e["consumed_by"] for e in inbox]
        if None in consumers or len(set(consumers)) != len(consumers) or set(consumers) != set(waits):
            problems.append(f"{name}: events consumed by {consumers}, the waits are {sorted(waits)}")
            continue
        consumed += len(inbox)
        for event in inbox:
            buffered += event["received_at"] < waits[event["consumed_by"]]["started_at"]

    # Step bodies: each journaled attempt ran exactly once; any other run was cut short.
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    ended: dict[str, float] = {}  # a run's token: when its body ended
    replays: dict[int, dict[int, dict]] = defaultdict(dict)
    lapsed: dict[tuple[int, int], float] = {}  # (instance, epoch): when its holder counted the lease lapsed
    for record in records:
        kind = record[0]
        if kind == "run":
            _, name, key, pid, at, token = record
            runs[(name, key)].append({"pid": pid, "at": at, "token": token})
        elif kind == "ran":
            ended[record[5]] = record[4]
        elif kind == "replay":
            _, pk, epoch, pid, at, clock_error = record
            replays[pk][epoch] = {"pid": pid, "started": at, "released": None, "clock_error": clock_error,
                                  "outcome": None, "lapsed": None}
        elif kind == "released":
            _, pk, epoch, pid, at, outcome = record
            if epoch in replays[pk]:
                replays[pk][epoch].update(released=at, outcome=outcome)
        elif kind == "lapsed":
            _, pk, epoch, pid, at = record
            lapsed[(pk, epoch)] = at
    reruns = Counter()
    body_runs = 0
    for (name, key), windows in journaled_attempts.items():
        found = sorted(runs.get((name, key), []), key=lambda r: r["at"])
        body_runs += len(found)
        matched = set()
        for start, end in windows:
            inside = [r for r in found if start - CLOCK_TOLERANCE <= r["at"] <= end + CLOCK_TOLERANCE]
            if len(inside) != 1:
                problems.append(f"{name}: step {key}'s attempt at {start:.3f} matches {len(inside)} "
                                "body runs")
            matched.update(r["token"] for r in inside)
        # A run that no journaled attempt accounts for was cut short: its process died before the
        # step ran again, or the database restart failed its journal write. A run after the step's
        # last journaled attempt is a finished step running again.
        for run, following in zip(found, found[1:] + [None]):
            if run["token"] in matched:
                continue
            how = (f"ran at {run['at']:.3f} in {whois(run['pid'])} and "
                   f"{'ended' if run['token'] in ended else 'did not end'}")
            if following is None:
                problems.append(f"{name}: step {key} ran after its journaled result: it {how}")
            elif outage and run["at"] <= outage[1] and ended.get(run["token"], run["at"]) >= outage[0]:
                # The body ran while the database was down (a long one may have begun before): the
                # restart cut the connection its journal write needed.
                reruns["database"] += 1
            elif died_before(run["pid"], following["at"]):
                reruns["kill"] += 1
            elif connection_cut_near(run["pid"], run["at"], ended.get(run["token"])):
                reruns["connection"] += 1
            else:
                problems.append(f"{name}: step {key} ran twice: it {how}, and again at {following['at']:.3f}")

    # Replays: one at a time per instance. The next starts after the last let go (released its lease, or
    # counted it lapsed unrenewed: the database restart, a cut connection), or, if that one never let go,
    # after its process died.
    replay_count = killed_replays = overlaps = 0
    # Each replay's reading of the database's clock, which its lease is taken and held on: the server runs
    # on this host, so its clock is the host's, and a reading off by more than CLOCK_TOLERANCE would let
    # one worker take a lease over while its holder still counts it held.
    clock_errors = [r["clock_error"] for by_epoch in replays.values() for r in by_epoch.values()
                    if r["clock_error"] is not None]
    for pk, by_epoch in replays.items():
        for replay in by_epoch.values():
            if replay["clock_error"] is not None and abs(replay["clock_error"]) > CLOCK_TOLERANCE:
                problems.append(f"instance {pk}: {describe(replay)}")
        ordered = [by_epoch[epoch] for epoch in sorted(by_epoch)]
        replay_count += len(ordered)
        instance_name = by_pk[pk].instance_id if pk in by_pk else None
        for epoch, replay in by_epoch.items():
            replay["lapsed"] = lapsed.get((pk, epoch))
            # It let go when it released the lease, or (killed before it could) when the lease lapsed.
            replay["let_go"] = replay["released"] if replay["released"] is not None else replay["lapsed"]
        for before, after in zip(ordered, ordered[1:]):
            killed_replays += before["released"] is None
            if before["let_go"] is not None:
                if after["started"] < before["let_go"]:
                    overlaps += 1
                    early = before["let_go"] - after["started"]
                    problems.append(f"instance {pk}: a replay started {early:.3f} s before the previous "
                                    f"one let go: {describe(before)}, then {describe(after)}")
                continue
            if not died_before(before["pid"], after["started"]):
                overlaps += 1
                bodies = sorted((run["at"], key) for (run_name, key), found in runs.items()
                                if run_name == instance_name
                                for run in found if run["pid"] == before["pid"] and run["at"] >= before["started"])
                problems.append(f"instance {pk}: {describe(before)} never let go, and the next started at "
                                f"{after['started']:.3f}; its process's step bodies of the instance since: "
                                f"{[(f'{at:.3f}', key) for at, key in bodies]}; the database down "
                                f"{outage and [f'{moment:.3f}' for moment in outage]}")
        if ordered[-1]["released"] is None:
            killed_replays += 1
        # A replay that ended says when it let go: its release, or the lapse of its lease unrenewed. From
        # then on it started no step body of its instance (one already running may go on, as the leases
        # page says). One killed after a lapse may have gone on had a renewal landed before the kill.
        for index, replay in enumerate(ordered):
            if replay["released"] is None or instance_name is None:
                continue
            # Until this process's next replay of the instance, whose bodies are its own.
            until = min((r["started"] for r in ordered[index + 1:] if r["pid"] == replay["pid"]),
                        default=float("inf"))
            # A body's record follows the replay's check of its lease by a moment.
            late = [(key, run["at"]) for (run_name, key), found in runs.items() if run_name == instance_name
                    for run in found
                    if run["pid"] == replay["pid"] and replay["released"] + CLOCK_TOLERANCE < run["at"] < until]
            for key, at in late:
                problems.append(f"instance {pk}: step {key} started at {at:.3f}, after its replay had let go: "
                                f"{describe(replay)}")

    first = min(r["created_at"] for r in instances.values())
    last = max((r["ended_at"] for r in instances.values() if r["ended_at"]), default=first)
    return {
        "problems": problems,
        "mix": f"{mix['steps']} plain steps, {sum(1 for p in plan if p.params.get('long_ms'))} steps longer "
               f"than WEDGE_SECONDS, {sum(1 for p in plan if p.params['failures'])} flaky steps "
               f"failing {mix['failures']} times, {sum(1 for p in plan if p.params['sleep'])} sleeps, "
               f"{mix['events']} waits for events",
        "run_seconds": (last - first).total_seconds(),
        "consumed": consumed,
        "buffered": buffered,
        "steps": step_rows,
        "attempts": attempts_total,
        "runs": body_runs,
        "reruns_kill": reruns["kill"],
        "reruns_database": reruns["database"],
        "reruns_connection": reruns["connection"],
        "database_attempts": database_attempts,
        "replays": replay_count,
        "replays_killed": killed_replays,
        "unseen": len(unseen),
        "deaths": sum(1 for found in lives.values() if found.gone and found.gone < chaos.stopped_at),
        "overlaps": overlaps,
        "clock_error": max((abs(e) for e in clock_errors), default=0.0),
        "clock_readings": len(clock_errors),
        "lapsed": len(lapsed),
    }
