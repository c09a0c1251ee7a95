"""Parts 4, 5 and 7 through a real ``workflows_worker --workers 2`` subprocess, for one database
and broker (``benchmarks.settings`` and its environment pick which).

    python -m benchmarks.cluster --out result.json --work-dir DIR [--quick] [--profile-dir DIR]

4. cluster throughput: 2,000 instances of 3 steps, created in batches of 100 while the worker runs;
5. latency: event to resume (one event at a time), timer lateness (timers spread over 5 seconds);
7. idle cost: 100,000 instances asleep for a day (bulk-inserted, one journal row each): the CPU
   of the worker command and all its processes (/proc/<pid>/stat), and its statements per second
   (counted by an execute wrapper in every process; on PostgreSQL also pg_stat_database's commits);
   then 10,000 of them due at once: the time until all have resumed and completed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.db.models import Count, Max, Min  # noqa: E402

from benchmarks import querylog  # noqa: E402
from benchmarks.common import (  # noqa: E402
    backend_cpu,
    backend_cpu_delta,
    cpu_delta,
    cpu_seconds,
    log,
    machine_busy,
    machine_ticks,
    percentile,
    roles,
    summary,
    write_json,  # noqa: E402
)
from django_workflows import workflows  # noqa: E402
from benchmarks import compat  # noqa: E402
clock = compat.clock()
from django_workflows.models import (  # noqa: E402
    Event,
    Instance,
    Step,
    StepKind,
    WorkerHeartbeat,  # noqa: E402
)

ROOT = Path(__file__).resolve().parent.parent


class Worker:
    """``python -m django workflows_worker --workers 2`` in its own session, counting its queries."""

    def __init__(self, work_dir: Path, name: str):
        self.query_dir = work_dir / f"queries-{name}"
        shutil.rmtree(self.query_dir, ignore_errors=True)
        self.log_path = work_dir / f"worker-{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> Worker:
        env = dict(os.environ)
        env.update({"BENCH_QUERY_LOG": str(self.query_dir), "PYTHONPATH": str(ROOT),
                    "DJANGO_SETTINGS_MODULE": "benchmarks.settings"})
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "workflows_worker", "--workers", "2", "--max-seconds", "1800"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not WorkerHeartbeat.objects.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {self.output()}")
            time.sleep(0.1)
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of its session (the cluster's processes): only what this worker started.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        self.log.close()


def clean() -> None:
    """Empty the workflow tables and django-q2's queue (the worker keeps running)."""
    if connection.vendor == "postgresql":
        # CASCADE: with the instances go the tables that point at them (journal, inbox, deliveries, and
        # any added later), not the workers' own rows.
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE django_workflows_instance, django_q_ormq CASCADE")
    else:
        from django_q.models import OrmQ

        Event.objects.all().delete()
        Step.objects.all().delete()
        Instance.objects.all().delete()
        OrmQ.objects.all().delete()


def wait_until(predicate, timeout: float, interval: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def count_done(workflow: str) -> int:
    return Instance.objects.filter(workflow_name=workflow, status__in=("complete", "errored")).count()


def assert_complete(workflow: str, expected: int) -> None:
    statuses = dict(Instance.objects.filter(workflow_name=workflow).values_list("status").annotate(
        n=Count("id")).values_list("status", "n"))
    assert statuses == {"complete": expected}, statuses


# -- 4. throughput --------------------------------------------------------------------------------

def throughput(count: int, worker: Worker | None = None) -> dict:
    clean()
    handle = workflows.get("bench-three")
    cpu_before = cpu_seconds(worker.pid) if worker else {}
    backends = backend_cpu(settings.DATABASES["default"]["NAME"]) if connection.vendor == "postgresql" else None
    ticks = machine_ticks()
    started = time.time()
    for offset in range(0, count, 100):
        handle.create_batch([{} for _ in range(min(100, count - offset))])
    created = time.time()
    wait_until(lambda: count_done("bench-three") >= count, 600, 0.25, f"{count} instances to finish")
    assert_complete("bench-three", count)
    last = Instance.objects.aggregate(last=Max("ended_at"))["last"].timestamp()
    busy = machine_busy(ticks, machine_ticks())
    cpu = cpu_delta(cpu_before, cpu_seconds(worker.pid)) if worker else None
    if backends is not None:
        backends = backend_cpu_delta(backends, backend_cpu(settings.DATABASES["default"]["NAME"]))
    return {"rate": count / (last - started), "seconds": last - started, "create_seconds": created - started,
            "worker_cpu_ms": cpu / count * 1000 if cpu is not None else None,
            "backend_cpu_ms": backends / count * 1000 if backends is not None else None,
            "machine_busy": busy, "load_average": os.getloadavg()[0]}


# -- 5. latency -----------------------------------------------------------------------------------

def event_latency(count: int) -> list[float]:
    clean()
    handles = workflows.get("bench-waiter").create_batch([{} for _ in range(count)])
    wait_until(lambda: Instance.objects.filter(workflow_name="bench-waiter", status="waiting",
                                               waiting_for__isnull=False).count() == count,
               120, 0.1, "the waiters to wait")
    latencies = []
    for handle in handles:
        time.sleep(random.uniform(0.0, 0.1))  # not in step with the broker's poll
        sent = time.time()
        handle.send_event(type="go")
        wait_until(lambda h=handle: Instance.objects.filter(pk=h.pk, status="complete").exists(), 60, 0.005,
                   "the waiter to resume")
        latencies.append(Instance.objects.values_list("output", flat=True).get(pk=handle.pk) - sent)
    return latencies


def timer_lateness(count: int, spread: float = 5.0, lead: float = 3.0) -> list[float]:
    clean()
    start = time.time() + lead
    untils = [start + spread * n / count for n in range(count)]
    handles = workflows.get("bench-timer").create_batch([{"params": {"until": u}} for u in untils])
    wait_until(lambda: count_done("bench-timer") >= count, 120, 0.2, "the timers to fire")
    assert_complete("bench-timer", count)
    outputs = dict(Instance.objects.filter(workflow_name="bench-timer").values_list("pk", "output"))
    return [outputs[h.pk] - u for h, u in zip(handles, untils)]


# -- 7. idle cost and a burst of due timers -------------------------------------------------------

def insert_sleepers(count: int) -> tuple[int, int]:
    """Insert ``count`` bench-napper instances asleep for a day, each with its sleep's journal row,
    as a replay would have left them (two INSERT ... SELECT statements). Returns their pk range."""
    clean()
    now = clock.now()
    ops = connection.ops
    stamp, wake = ops.adapt_datetimefield_value(now), ops.adapt_datetimefield_value(now + timedelta(days=1))
    postgres = connection.vendor == "postgresql"
    numbers = ("SELECT generate_series(0, %s - 1) AS n" if postgres else
               "WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c WHERE n + 1 < %s) SELECT n FROM c")
    text = "n::text" if postgres else "CAST(n AS TEXT)"
    empty, config = ("'[]'::jsonb", "'{\"duration\": 86400000}'::jsonb") if postgres else (
        "'[]'", "'{\"duration\": 86400000}'")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_workflows_instance (workflow_name, instance_id, params, status, output, error, "
            "traceback, wake_at, waiting_for, current_step, lease_owner, lease_expires_at, epoch, crash_count, "
            "created_at, started_at, ended_at, updated_at) "
            f"SELECT 'bench-napper', 'nap-' || {text}, NULL, 'waiting', NULL, NULL, '', %s, NULL, 'nap-1', '', "
            f"NULL, 1, 0, %s, %s, NULL, %s FROM ({numbers}) AS numbers",
            [wake, stamp, stamp, stamp, count],
        )
        cursor.execute(
            "INSERT INTO django_workflows_step (instance_id, key, name, kind, status, attempts, config, result, "
            "error, wake_at, started_at, ended_at) "
            f"SELECT id, 'nap-1', 'nap', 'sleep', 'waiting', {empty}, {config}, NULL, NULL, %s, %s, NULL "
            "FROM django_workflows_instance WHERE workflow_name = 'bench-napper'",
            [wake, stamp],
        )
    first, last = Instance.objects.filter(workflow_name="bench-napper").aggregate(
        first=Min("pk"), last=Max("pk")).values()
    assert last - first + 1 == count == Step.objects.filter(kind=StepKind.SLEEP).count()
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE django_workflows_instance")
            cursor.execute("ANALYZE django_workflows_step")
    return first, last


class Commits:
    """Transactions committed in the benchmark's PostgreSQL database, read from pg_stat_database
    over a connection to another database (so that reading them adds none)."""

    def __init__(self):
        import psycopg

        db = settings.DATABASES["default"]
        self.name = db["NAME"]
        self.conn = psycopg.connect(host=db["HOST"] or None, port=db["PORT"] or None, user=db["USER"] or None,
                                    password=db["PASSWORD"] or None, dbname="template1", autocommit=True)

    def read(self) -> int:
        return self.conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                                 [self.name]).fetchone()[0]

    def close(self) -> None:
        self.conn.close()


def idle(worker: Worker, windows: int, seconds: float, settle: float) -> dict:
    log(f"  idle: settling {settle:.0f} s, then {windows} window(s) of {seconds:.0f} s")
    connection.close()  # this process says nothing to the database while the worker idles
    time.sleep(settle)
    commits = Commits() if connection.vendor == "postgresql" else None
    cpu_percent, queries, kinds, xacts, per_process = [], [], [], [], []
    for _ in range(windows):
        cpu_before, q_before = cpu_seconds(worker.pid), querylog.snapshot(worker.query_dir)
        x_before = commits.read() if commits else None
        started = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        cpu_after, q_after = cpu_seconds(worker.pid), querylog.snapshot(worker.query_dir)
        x_after = commits.read() if commits else None
        cpu_percent.append(cpu_delta(cpu_before, cpu_after) / elapsed * 100)
        per_process.append({pid: round((value - cpu_before.get(pid, 0.0)) / elapsed * 100, 2)
                            for pid, value in cpu_after.items()})
        counted = querylog.difference(q_before, q_after)
        queries.append(sum(counted.values()) / elapsed)
        kinds.append({kind: counted.get(kind, 0) / elapsed for kind in querylog.KINDS})
        if commits:
            xacts.append((x_after - x_before) / elapsed)
    if commits:
        commits.close()
    names = roles(worker.pid)  # after the windows: py-spy's look must not land in them
    per_process = [{names.get(pid, str(pid)): value for pid, value in window.items()} for window in per_process]
    by_kind = {kind: summary([k[kind] for k in kinds]) for kind in querylog.KINDS}
    return {"cpu_percent": summary(cpu_percent), "queries_per_second": summary(queries), "by_kind": by_kind,
            "commits_per_second": summary(xacts) if xacts else None, "per_process_cpu": per_process,
            "window_seconds": seconds}


def burst(first: int, due: int) -> dict:
    last = first + due - 1
    now = clock.now()
    with transaction.atomic():
        Instance.objects.filter(pk__gte=first, pk__lte=last).update(wake_at=now)
        Step.objects.filter(instance_id__gte=first, instance_id__lte=last, kind=StepKind.SLEEP).update(wake_at=now)
    wait_until(lambda: count_done("bench-napper") >= due, 900, 0.5, f"{due} due instances to finish")
    finished = Instance.objects.filter(workflow_name="bench-napper", status__in=("complete", "errored"))
    assert finished.filter(status="complete").count() == due
    last_end = finished.aggregate(last=Max("ended_at"))["last"]
    seconds = (last_end - now).total_seconds()
    return {"seconds": seconds, "rate": due / seconds, "due": due}


# -- profiles (py-spy) ----------------------------------------------------------------------------

def py_spy(worker: Worker, out: Path):
    """Start ``py-spy record --gil`` (samples of the threads holding the GIL: where the CPU goes) of
    the worker and all its processes; ``stop_py_spy`` ends it and writes ``out``."""
    exe = Path(sys.executable).with_name("py-spy")
    if not exe.exists():
        return None
    return subprocess.Popen([str(exe), "record", "--pid", str(worker.pid), "--subprocesses", "--gil",
                             "--rate", "250", "--format", "raw", "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_py_spy(process) -> None:
    if process is None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parts", default="throughput,latency,idle,burst")
    parser.add_argument("--throughput-count", type=int, default=0)
    parser.add_argument("--profile-dir", default="")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    quick = args.quick
    runs = 1 if quick else 3
    db = settings.DATABASES["default"]
    result: dict = {"backend": connection.vendor, "broker": "redis" if "redis" in settings.Q_CLUSTER else "orm",
                    "quick": quick, "q_cluster": settings.Q_CLUSTER, "conn_max_age": db.get("CONN_MAX_AGE", 0)}
    if result["broker"] == "redis":
        import redis

        redis.Redis(**settings.Q_CLUSTER["redis"]).flushdb()
    clean()
    WorkerHeartbeat.objects.all().delete()
    worker = Worker(Path(args.work_dir), args.name).start()
    profile = None
    try:
        throughput(20)  # warm up the cluster's processes and their connections

        if "throughput" in parts:
            count = args.throughput_count or (200 if quick else 2000)
            log(f"{args.name}: 4. throughput, {runs} run(s) of {count} instances")
            if args.profile_dir:
                profile = py_spy(worker, Path(args.profile_dir) / f"{args.name}-throughput.txt")
            runs_4 = []
            for n in range(runs):
                runs_4.append(throughput(count, worker))
                r = runs_4[-1]
                log(f"  run {n + 1}: {r['rate']:.0f} workflows/s ({r['seconds']:.1f} s); CPU a workflow: worker "
                    f"{r['worker_cpu_ms']:.1f} ms, PostgreSQL backends {r['backend_cpu_ms'] or 0:.1f} ms; "
                    f"machine {r['machine_busy']:.0%} busy")
            stop_py_spy(profile)
            result["throughput"] = {
                "rate": summary([r["rate"] for r in runs_4]), "count": count, "runs": runs_4,
                "worker_cpu_ms": summary([r["worker_cpu_ms"] for r in runs_4]),
                "backend_cpu_ms": summary([r["backend_cpu_ms"] for r in runs_4]),
                "machine_busy": summary([r["machine_busy"] for r in runs_4]),
            }

        if "latency" in parts:
            events, timers = (5, 5) if quick else (50, 50)
            log(f"{args.name}: 5. latency, {runs} run(s) of {events} events and {timers} timers")
            p50s, p99s, t50s, t99s, samples = [], [], [], [], {"events": [], "timers": []}
            for n in range(runs):
                latencies = event_latency(events)
                lateness = timer_lateness(timers, spread=1.0 if quick else 5.0, lead=2.0 if quick else 3.0)
                samples["events"].append(latencies)
                samples["timers"].append(lateness)
                p50s.append(percentile(latencies, 0.5) * 1000)
                p99s.append(percentile(latencies, 0.99) * 1000)
                t50s.append(percentile(lateness, 0.5) * 1000)
                t99s.append(percentile(lateness, 0.99) * 1000)
                log(f"  run {n + 1}: event p50 {p50s[-1]:.0f} ms p99 {p99s[-1]:.0f} ms; "
                    f"timer p50 {t50s[-1]:.0f} ms p99 {t99s[-1]:.0f} ms")
            result["latency"] = {"event_p50_ms": summary(p50s), "event_p99_ms": summary(p99s),
                                 "timer_p50_ms": summary(t50s), "timer_p99_ms": summary(t99s),
                                 "events": events, "timers": timers, "samples": samples}

        if "idle" in parts:
            sleepers, due = (2000, 200) if quick else (100_000, 10_000)
            log(f"{args.name}: 7. idle cost with {sleepers:,} sleeping instances"
                + (f", then {due:,} due at once" if "burst" in parts else ""))
            started = time.monotonic()
            first, _ = insert_sleepers(sleepers)
            log(f"  inserted in {time.monotonic() - started:.1f} s")
            windows, seconds, settle = (1, 5, 3) if quick else (3, 15, 5)
            if args.profile_dir:
                profile = py_spy(worker, Path(args.profile_dir) / f"{args.name}-idle.txt")
            result["idle"] = idle(worker, windows, seconds, settle)
            stop_py_spy(profile)
            result["idle"]["sleepers"] = sleepers
            idle_result = result["idle"]
            log(f"  idle: CPU {idle_result['cpu_percent']['median']:.2f}% of a core, "
                f"{idle_result['queries_per_second']['median']:.1f} statements/s"
                + (f", {idle_result['commits_per_second']['median']:.1f} transactions/s"
                   if idle_result["commits_per_second"] else ""))
            if "burst" in parts:
                result["burst"] = burst(first, due)
                log(f"  {due:,} due at once: all resumed in {result['burst']['seconds']:.1f} s "
                    f"({result['burst']['rate']:.0f}/s)")
        clean()
    finally:
        worker.stop()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
