"""Part 4 (cluster throughput) on the tasks executor, to set beside django-q2's: the same 3-step
instances, created in batches of 100, replayed by two ``manage.py db_worker`` processes
(django-tasks-db, one task at a time each, as django-q2's two workers), with
``workflows_worker --no-cluster`` beside them for the timers and the sweeper.

    python -m benchmarks.tasks_executor --out result.json --work-dir DIR --name NAME [--quick]

``benchmarks.settings`` gives the TASKS backend; the driver gives DJANGO_WORKFLOWS (the executor).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django_tasks_db.models import DBTaskResult  # noqa: E402

from benchmarks.cluster import clean, throughput  # noqa: E402
from benchmarks.common import cpu_delta, cpu_seconds, log, summary, write_json  # noqa: E402
from django_workflows.models import WorkerHeartbeat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DB_WORKERS = 2
# An idle db_worker looks for a task every 0.1 s (its default, 1 s, would make a replay wait that long).
DB_WORKER_ARGS = ["--interval", "0.1", "--no-startup-delay", "--verbosity", "0"]


class Processes:
    """``workflows_worker --no-cluster`` and the processes that run the replays (``commands``, each the
    arguments of ``python -m``: the ``db_worker`` processes by default), each in its own session."""

    def __init__(self, work_dir: Path, name: str, commands: list[list[str]] | None = None):
        self.log_path = work_dir / f"worker-{name}.log"
        self.processes: list[subprocess.Popen] = []
        self.commands = commands or [["django", "db_worker", *DB_WORKER_ARGS]] * DB_WORKERS

    def start(self) -> Processes:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
        self.log = open(self.log_path, "ab")
        commands = [["django", "workflows_worker", "--no-cluster", "--max-seconds", "1800"], *self.commands]
        for command in commands:
            self.processes.append(subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env,
                                                   stdout=self.log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        deadline = time.monotonic() + 60
        while not WorkerHeartbeat.objects.exists():
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        return self

    def cpu(self) -> dict[int, float]:
        return {pid: seconds for p in self.processes for pid, seconds in cpu_seconds(p.pid).items()}

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.log.close()


def run(count: int, processes: Processes) -> dict:
    DBTaskResult.objects.all().delete()
    before = processes.cpu()
    result = throughput(count)
    cpu = cpu_delta(before, processes.cpu())
    result["worker_cpu_ms"] = cpu / count * 1000
    result["tasks"] = DBTaskResult.objects.count()
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
    result: dict = {"backend": connection.vendor, "executor": settings.DJANGO_WORKFLOWS, "tasks": settings.TASKS,
                    "db_workers": DB_WORKERS, "db_worker_args": DB_WORKER_ARGS, "quick": args.quick}
    clean()
    WorkerHeartbeat.objects.all().delete()
    processes = Processes(Path(args.work_dir), args.name).start()
    try:
        run(20, processes)  # warm up the workers and their connections
        log(f"{args.name}: 4. throughput on the tasks executor, {runs} run(s) of {count} instances")
        runs_4 = []
        for n in range(runs):
            runs_4.append(run(count, processes))
            r = runs_4[-1]
            log(f"  run {n + 1}: {r['rate']:.0f} workflows/s ({r['seconds']:.1f} s); CPU a workflow: workers "
                f"{r['worker_cpu_ms']:.1f} ms, PostgreSQL backends {r['backend_cpu_ms'] or 0:.1f} ms; "
                f"{r['tasks']} tasks; machine {r['machine_busy']:.0%} busy")
        result["throughput"] = {
            "rate": summary([r["rate"] for r in runs_4]), "count": count, "runs": runs_4,
            "worker_cpu_ms": summary([r["worker_cpu_ms"] for r in runs_4]),
            "backend_cpu_ms": summary([r["backend_cpu_ms"] for r in runs_4]),
            "machine_busy": summary([r["machine_busy"] for r in runs_4]),
        }
        clean()
        DBTaskResult.objects.all().delete()
    finally:
        processes.stop()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
