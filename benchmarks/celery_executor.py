"""Part 4 (cluster throughput) on the Celery executor, to set beside django-q2's: the same 3-step
instances, created in batches of 100, replayed by one ``celery worker`` with two prefork pool processes
(as django-q2's two workers) on the Redis broker, with ``workflows_worker --no-cluster`` beside it for the
timers and the sweeper.

    python -m benchmarks.celery_executor --out result.json --work-dir DIR --name NAME [--quick]

``benchmarks.settings`` gives the Celery broker (Redis, ``TEST_REDIS_DB``); the driver gives
DJANGO_WORKFLOWS (the executor, ``services.CELERY_EXECUTOR``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from benchmarks.cluster import clean, throughput  # noqa: E402
from benchmarks.common import cpu_delta, log, summary, write_json  # noqa: E402
from benchmarks.tasks_executor import Processes  # noqa: E402
from django_workflows.models import WorkerHeartbeat  # noqa: E402

POOL_PROCESSES = 2
CELERY_WORKER = ["celery", "-A", "benchmarks.celery_app", "worker", "--queues", "workflows", "--pool", "prefork",
                 "--concurrency", str(POOL_PROCESSES), "--loglevel", "WARNING", "--without-gossip",
                 "--without-mingle", "--without-heartbeat"]


def run(count: int, processes: Processes) -> dict:
    before = processes.cpu()
    result = throughput(count)
    result["worker_cpu_ms"] = cpu_delta(before, processes.cpu()) / count * 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 1 if args.quick else 3
    count = 200 if args.quick else 2000
    result: dict = {"backend": connection.vendor, "executor": settings.DJANGO_WORKFLOWS,
                    "broker": settings.CELERY_BROKER_URL, "celery_worker": CELERY_WORKER, "quick": args.quick}
    clean()
    WorkerHeartbeat.objects.all().delete()
    processes = Processes(Path(args.work_dir), args.name, [CELERY_WORKER]).start()
    try:
        run(20, processes)  # warm up the worker, its pool and their connections
        log(f"{args.name}: 4. throughput on the Celery executor, {runs} run(s) of {count} instances")
        runs_4 = []
        for n in range(runs):
            runs_4.append(run(count, processes))
            r = runs_4[-1]
            log(f"  run {n + 1}: {r['rate']:.0f} workflows/s ({r['seconds']:.1f} s); CPU a workflow: workers "
                f"{r['worker_cpu_ms']:.1f} ms, PostgreSQL backends {r['backend_cpu_ms'] or 0:.1f} ms; "
                f"machine {r['machine_busy']:.0%} busy")
        result["throughput"] = {
            "rate": summary([r["rate"] for r in runs_4]), "count": count, "runs": runs_4,
            "worker_cpu_ms": summary([r["worker_cpu_ms"] for r in runs_4]),
            "backend_cpu_ms": summary([r["backend_cpu_ms"] for r in runs_4]),
            "machine_busy": summary([r["machine_busy"] for r in runs_4]),
        }
        clean()
    finally:
        processes.stop()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
