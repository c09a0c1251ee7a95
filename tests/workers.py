"""Real ``workflows_worker`` subprocesses for the tests, against the test database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

# Short leases and quick sweeps, so recovery from a killed worker takes seconds, not minutes.
FAST_RECOVERY = {"LEASE_SECONDS": 3, "SWEEP_INTERVAL": 0.5, "REDISPATCH_SECONDS": 5, "POISON_LIMIT": 2,
                 "WEDGE_SECONDS": 4}


class WorkerProcess:
    def __init__(self, log_dir: Path, *, broker: str = "orm", workers: int = 2, name: str = "worker",
                 settings: dict | None = None, command: str = "workflows_worker", extra_args=(),
                 env: dict | None = None):
        self.log_path = log_dir / f"{name}.log"
        self.broker = broker
        self.workers = workers
        self.settings = {**FAST_RECOVERY, **(settings or {})}
        self.command = command
        self.extra_args = list(extra_args)
        # More environment for the worker (libfaketime, say).
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen | None = None

    def env(self) -> dict:
        env = dict(os.environ)
        env.update({
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "TEST_DATABASE_NAME": str(connection.settings_dict["NAME"]),
            "TEST_WORKFLOWS_SETTINGS": json.dumps(self.settings),
            "TEST_BROKER": self.broker,
            "TEST_AUDIT_REPLAYS": "1",
            "PYTHONPATH": str(ROOT),
        })
        env.update(self.extra_env)
        return env

    def start(self) -> WorkerProcess:
        # Celery's worker is its own program (``celery -A app worker``), not a management command.
        args = [sys.executable, "-m", "celery" if self.command == "celery" else "django"]
        args += [] if self.command == "celery" else [self.command]
        if self.command == "workflows_worker":
            args += ["--workers", str(self.workers), "--max-seconds", "240"]
        self.log = open(self.log_path, "ab")
        self.process = subprocess.Popen(args + self.extra_args, cwd=ROOT, env=self.env(), stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout: float = 30) -> int | None:
        try:
            if self.process is None or self.process.poll() is not None:
                return self.process.returncode if self.process else None
            # A Celery worker gets the cold shutdown (SIGQUIT): its warm one waits seconds on its broker's
            # connection, and a test that stops it is over; a workflows_worker is stopped as in production.
            self.process.send_signal(signal.SIGQUIT if self.command == "celery" else signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill_all()
                return None
        finally:
            self.log.close()

    def kill_all(self) -> None:
        """SIGKILL the command and every process it started (its session)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


def as_a_terminal_starts_it() -> None:
    """``preexec_fn`` for a process a test starts as a user's shell would, in the foreground: Ctrl+C's
    SIGINT and SIGQUIT at their defaults. A test run started in the background (``make ... &``, as CI runs
    passes side by side) inherits them ignored, and the process would then keep ignoring them, as a
    program started under ``nohup`` or with ``&`` should."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def wait_for(predicate, timeout: float, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message}")


def status(instance) -> str:
    return instance.status()["status"]


def wait_status(instance, wanted: str, timeout: float = 30):
    return wait_for(lambda: status(instance) == wanted, timeout, message=f"{instance!r} to be {wanted}")


def complete_quick(count: int, timeout: float) -> list:
    """Create ``count`` instances of tests.testapp's ``quick`` (three steps) and wait for each to complete;
    return their handles."""
    from django_workflows import workflows

    instances = [workflows.get("quick").create(id=f"quick-{n}") for n in range(count)]
    for instance in instances:
        wait_status(instance, "complete", timeout)
    return instances


def create_crashable(tmp_path: Path, instance_id: str, timeout: float, workflow: str = "crashable"):
    """Create an instance of a workflow whose step writes its process's pid to a file, then waits to be
    killed (tests.testapp's ``crashable`` or ``kid-parent``); return its handle and that pid, once the step
    runs."""
    from django_workflows import workflows

    marker = tmp_path / "victim.pid"
    instance = workflows.get(workflow).create(id=instance_id, params={"marker": str(marker)})
    pid = int(wait_for(lambda: marker.exists() and marker.read_text(), timeout, message="the victim step to start"))
    return instance, pid


def assert_naps_resume_on_time(count: int = 5, within: float = 1.5) -> None:
    """Start ``count`` napper instances sleeping 2 seconds, through whatever worker runs, and assert each
    resumed within ``within`` seconds of its wake time (never before it)."""
    from statistics import median

    from django_workflows import workflows
    from django_workflows.models import Step

    instances = [workflows.get("napper").create(params={"duration": "2 seconds"}) for _ in range(count)]
    for instance in instances:
        wait_status(instance, "complete", 20)
    lateness = []
    for instance in instances:
        wake_at = Step.objects.get(instance_id=instance.pk, kind="sleep").wake_at.timestamp()
        lateness.append(instance.status()["output"]["at"] - wake_at)
    print(f"wake lateness: median {median(lateness) * 1000:.0f} ms, max {max(lateness) * 1000:.0f} ms")
    assert all(0 <= late <= within for late in lateness), lateness


def stop_process_group(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> str:
    """Stop a process started in a session of its own, with its whole group: ``sig``, then SIGKILL if it
    has not exited after ``timeout`` seconds; return what it wrote."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with process.stdout:
        return process.stdout.read()
