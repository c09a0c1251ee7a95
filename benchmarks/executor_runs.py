"""Part 4 (cluster throughput) on an executor other than django-q2's, to set beside it: the same 3-step
instances, created in batches of 100, replayed by the executor's own worker processes, with
``workflows_worker --no-cluster`` beside them for the timers and the sweeper. ``tasks_executor`` and
``celery_executor`` say which processes run the replays; the runs, their figures and the result file are
measured here, the same way for both.

Imported once ``django.setup()`` has run (each entry module sets it up first).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cluster import clean, throughput
from benchmarks.common import cpu_delta, cpu_seconds, log, summary, write_json
from django_workflows.models import WorkerHeartbeat

ROOT = Path(__file__).resolve().parent.parent


class Processes:
    """``workflows_worker --no-cluster`` and the processes that run the replays (``commands``, each the
    arguments of ``python -m``), each in its own session."""

    def __init__(self, work_dir: Path, name: str, commands: list[list[str]]):
        self.log_path = work_dir / f"worker-{name}.log"
        self.processes: list[subprocess.Popen] = []
        self.commands = commands

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


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--quick", action="store_true")
    return parser.parse_args()


class Executor:
    """What one executor adds to a run: clearing its own rows before it, and what it counts after it (its
    tasks' rows, for the tasks executor), as ``{key: value}`` added to the run's figures and its log line."""

    counts: tuple[str, ...] = ()

    def before_run(self) -> None:
        pass

    def counted(self) -> dict[str, int]:
        return {}


def measure(executor_name: str, commands: list[list[str]], result: dict, executor: Executor | None = None) -> None:
    """Measure part 4 on ``executor_name`` with ``commands`` replaying (1 run of 200 instances with --quick,
    3 of 2,000 otherwise, after a warm-up of 20), and write ``result`` with the runs' figures to --out."""
    args = arguments()
    executor = executor or Executor()
    runs, count = (1, 200) if args.quick else (3, 2000)
    result["quick"] = args.quick
    clean()
    WorkerHeartbeat.objects.all().delete()
    processes = Processes(Path(args.work_dir), args.name, commands).start()

    def run(count: int) -> dict:
        executor.before_run()
        before = processes.cpu()
        figures = throughput(count)
        figures["worker_cpu_ms"] = cpu_delta(before, processes.cpu()) / count * 1000
        figures.update(executor.counted())
        return figures

    try:
        run(20)  # warm up the workers and their connections
        log(f"{args.name}: 4. throughput on the {executor_name} executor, {runs} run(s) of {count} instances")
        runs_4 = []
        for n in range(runs):
            runs_4.append(run(count))
            r = runs_4[-1]
            counted = "".join(f"{r[key]} {key}; " for key in executor.counts)
            log(f"  run {n + 1}: {r['rate']:.0f} workflows/s ({r['seconds']:.1f} s); CPU a workflow: workers "
                f"{r['worker_cpu_ms']:.1f} ms, PostgreSQL backends {r['backend_cpu_ms'] or 0:.1f} ms; "
                f"{counted}machine {r['machine_busy']:.0%} busy")
        result["throughput"] = {
            "rate": summary([r["rate"] for r in runs_4]), "count": count, "runs": runs_4,
            "worker_cpu_ms": summary([r["worker_cpu_ms"] for r in runs_4]),
            "backend_cpu_ms": summary([r["backend_cpu_ms"] for r in runs_4]),
            "machine_busy": summary([r["machine_busy"] for r in runs_4]),
        }
        clean()
        executor.before_run()
    finally:
        processes.stop()
    write_json(args.out, result)
