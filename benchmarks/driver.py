"""``python -m benchmarks [--quick]``: set up the databases, run every measurement, write the report.

Each measurement runs in a child process configured by ``benchmarks.settings`` through its
environment (no Django in this one): SQLite (a fresh WAL file in a temporary directory) and
PostgreSQL (``bench_workflows`` and, for DBOS, ``bench_workflows_dbos``, created here and dropped at
the end), the ORM broker, and Redis (db 7, or BENCH_REDIS_DB; flushed) on PostgreSQL. A PostgreSQL or Redis that
cannot be reached, or a DBOS that cannot be imported, leaves its rows "not measured", with the
reason; the exit code is non-zero only when a measurement that could run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import log
from benchmarks.services import (
    CELERY_EXECUTOR,
    INLINE,
    POSTGRES_URL,
    TASKS_EXECUTOR,
    Postgres,
    _postgres_params,
    child_env,
    flush_redis,
    redis_reachable,
)

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
def run_child(args: list[str], env: dict, timeout: float) -> str | None:
    """Run ``python -m <args>``; return None on success, or why it failed."""
    log(f"== {' '.join(args[:2])} {' '.join(a for a in args[2:] if not a.startswith('/'))}")
    try:
        completed = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    return None if completed.returncode == 0 else f"exit code {completed.returncode}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="small counts, one run each (CI)")
    parser.add_argument("--only", default="", help="comma-separated configurations: sqlite, postgres, "
                        "sqlite-orm, postgres-orm, postgres-redis, postgres-orm-scheduled, "
                        "postgres-orm-max-age-0, postgres-tasks, postgres-celery, postgres-orm-herd, "
                        "postgres-redis-herd")
    parser.add_argument("--profile", action="store_true", help="also record py-spy profiles of the workers")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and the databases")
    parser.add_argument("--scale", action="store_true", help="only the scale part (benchmarks/scale.py): a "
                        "million instances on PostgreSQL, the request paths timed and explained; writes "
                        "benchmarks/SCALE.md")
    parser.add_argument("--output", default="", help="where REPORT.md goes (default: benchmarks/, or "
                        "benchmarks/quick/ with --quick)")
    parser.add_argument("--base", default="", help="A/B: parts 2-5 of this commit (built in a virtualenv of "
                        "its own) interleaved with HEAD's, each ratio with its spread (benchmarks/ab.py)")
    args = parser.parse_args()
    if args.base:
        from benchmarks import ab

        out = Path(args.output) if args.output else HERE / "quick" if args.quick else HERE
        return ab.run(args.base, args.quick, out, args.keep, set(filter(None, args.only.split(","))))
    if args.scale:
        return scale(args.keep)
    started = time.time()
    # A profiled run is perturbed by the profilers: its report goes beside the profiles, not over REPORT.md.
    out_dir = Path(args.output) if args.output else (
        HERE / "profiles" if args.profile else HERE / "quick" if args.quick else HERE)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-workflows-"))
    profile_dir = out_dir if args.profile else None
    if profile_dir:
        profile_dir.mkdir(exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    quick = ["--quick"] if args.quick else []

    sqlite_db = {"name": str(work / "bench.sqlite3")}
    postgres = Postgres(POSTGRES_URL)
    pg_missing = postgres.reachable()
    redis_missing = redis_reachable()
    results: dict = {"quick": args.quick, "started": started, "configs": {}, "skipped": {}, "failed": {}}
    try:
        import dbos  # noqa: F401
        dbos_missing = None
    except Exception as exc:
        dbos_missing = f"dbos cannot be imported: {type(exc).__name__}: {exc}"
    results["dbos_missing"] = dbos_missing

    plan = [
        ("sqlite", "inproc", sqlite_db, "orm", None, {}),
        # The install page recommends synchronous=FULL; the table measures NORMAL, as DBOS runs: both are reported.
        ("sqlite-full", "inproc", {"name": str(work / "bench-full.sqlite3")}, "orm", None,
         {"BENCH_SQLITE_SYNCHRONOUS": "FULL"}),
        ("postgres", "inproc", None, "orm", pg_missing, {}),
        ("sqlite-orm", "cluster", sqlite_db, "orm", None, {}),
        ("postgres-orm", "cluster", None, "orm", pg_missing, {}),
        ("postgres-redis", "cluster", None, "redis", pg_missing or redis_missing, {}),
    ]
    # postgres-orm's idle cost again, with 50 workflows declaring two cron schedules each and 50
    # declaring concurrency and rate limits: it should not grow with them.
    plan.append(("postgres-orm-scheduled", "cluster", None, "orm", pg_missing,
                 {"BENCH_SCHEDULES": "50", "BENCH_LIMITS": "50", "parts": "idle"}))
    if not args.quick:
        # postgres-orm with Django's default CONN_MAX_AGE = 0, smaller (2,000 would take minutes a run).
        plan.append(("postgres-orm-max-age-0", "cluster", None, "orm", pg_missing,
                     {"BENCH_CONN_MAX_AGE": "0", "parts": "throughput,latency,idle", "count": "500"}))
    # Part 4 on the tasks executor (django-tasks-db's db_worker) instead of django-q2, on PostgreSQL.
    plan.append(("postgres-tasks", "tasks", None, "orm", pg_missing, {}))
    # And on the Celery executor (a celery worker of two pool processes, the Redis broker).
    plan.append(("postgres-celery", "celery", None, "redis", pg_missing or redis_missing, {}))
    # The thundering herd through two worker commands (benchmarks/herd.py): the ORM broker, and the
    # Redis broker in the full run.
    plan.append(("postgres-orm-herd", "herd", None, "orm", pg_missing, {}))
    if not args.quick:
        plan.append(("postgres-redis-herd", "herd", None, "redis", pg_missing or redis_missing, {}))
    try:
        if not pg_missing:
            postgres.create()
        pg_db = {"name": postgres.name, "url": postgres.url()}
        migrated = set()
        for name, kind, database, broker, missing, extra in plan:
            if only and name not in only:
                continue
            if missing:
                log(f"== {name}: not measured ({missing})")
                results["skipped"][name] = missing
                continue
            database = database or pg_db
            if database["name"] not in migrated:
                env = child_env(database, "orm", {})
                subprocess.run([sys.executable, "-m", "django", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
                migrated.add(database["name"])
            out = work / f"{name}.json"
            if kind == "inproc":
                dbos_url = ""
                if not dbos_missing and not extra:
                    dbos_url = (f"sqlite:///{work / 'dbos.sqlite3'}" if database is sqlite_db
                                else postgres.url(postgres.dbos_name))
                failure = run_child(["benchmarks.inproc", "--out", str(out), "--dbos-url", dbos_url, *quick],
                                    child_env(database, broker, INLINE, extra), timeout=900)
                if profile_dir and not failure:
                    failure = run_child(["benchmarks.profile", "--out-dir", str(profile_dir)],
                                        child_env(database, broker, INLINE), timeout=600)
            elif kind == "tasks":
                failure = run_child(["benchmarks.tasks_executor", "--out", str(out), "--work-dir", str(work),
                                     "--name", name, *quick], child_env(database, broker, TASKS_EXECUTOR, extra),
                                    timeout=1200)
            elif kind == "celery":
                flush_redis()
                failure = run_child(["benchmarks.celery_executor", "--out", str(out), "--work-dir", str(work),
                                     "--name", name, *quick], child_env(database, broker, CELERY_EXECUTOR, extra),
                                    timeout=1200)
                flush_redis()
            elif kind == "herd":
                if broker == "redis":
                    flush_redis()
                options = ["--profile-dir", str(profile_dir)] if profile_dir else []
                failure = run_child(["benchmarks.herd", "--out", str(out), "--work-dir", str(work), "--name", name,
                                     *quick, *options], child_env(database, broker, {}, extra), timeout=1200)
                if broker == "redis":
                    flush_redis()
            else:
                if broker == "redis":
                    flush_redis()
                extra = dict(extra)
                options = ["--profile-dir", str(profile_dir)] if profile_dir else []
                options += ["--parts", extra.pop("parts")] if "parts" in extra else []
                options += ["--throughput-count", extra.pop("count")] if "count" in extra else []
                failure = run_child(["benchmarks.cluster", "--out", str(out), "--work-dir", str(work),
                                     "--name", name, *quick, *options], child_env(database, broker, {}, extra),
                                    timeout=1200)
                if broker == "redis":
                    flush_redis()
            if failure:
                log(f"== {name} FAILED: {failure}")
                results["failed"][name] = failure
                for log_file in [*work.glob(f"worker-{name}.log"), *work.glob(f"worker-{name}-[0-9].log")]:
                    print(log_file.read_text(errors="replace")[-4000:], file=sys.stderr)
                continue
            results["configs"][name] = json.loads(out.read_text())
    finally:
        if not pg_missing and not args.keep:
            try:
                postgres.drop()
            except Exception as exc:
                log(f"could not drop the benchmark databases: {exc}")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    results["seconds"] = time.time() - started
    results["machine"] = machine()

    from benchmarks import report

    report.write(results, out_dir)
    return 1 if results["failed"] else 0


def scale(keep: bool) -> int:
    """The scale part, in a database of its own (``bench_scale`` beside ``BENCH_POSTGRES_URL``'s)."""
    postgres = Postgres(POSTGRES_URL.rsplit("/", 1)[0] + "/bench_scale")
    missing = postgres.reachable()
    if missing:
        log(f"== scale: not measured ({missing})")
        return 1
    with postgres._admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{postgres.name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{postgres.name}" TEMPLATE template0')
    database = {"name": postgres.name, "url": postgres.url()}
    try:
        env = child_env(database, "orm", {})
        subprocess.run([sys.executable, "-m", "django", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        failure = run_child(["benchmarks.scale"], env, timeout=3600)
    finally:
        if keep:
            log(f"kept the database {postgres.name} (python -m benchmarks.scale --reuse measures it again)")
        else:
            with postgres._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{postgres.name}" WITH (FORCE)')
    if failure:
        log(f"== scale: {failure}")
    return 1 if failure else 0


def machine() -> dict:
    import platform

    info = {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        info["load_average"] = os.getloadavg()
    except OSError:
        pass
    try:
        import django
        import django_q

        info["django"] = django.get_version()
        info["django_q2"] = getattr(django_q, "__version__", None)
        from importlib.metadata import version

        info["django_q2"] = version("django-q2")
        info["dbos"] = version("dbos")
    except Exception:
        pass
    try:
        import psycopg

        params = {k: v for k, v in _postgres_params(POSTGRES_URL).items() if k != "dbname" and v is not None}
        with psycopg.connect(dbname="template1", connect_timeout=3, **params) as conn:
            info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
            info["postgres_synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]
    except Exception:
        pass
    import sqlite3

    info["sqlite"] = sqlite3.sqlite_version
    return info
