"""``manage.py demo`` as a user runs it: the real command in a subprocess, on a fresh SQLite file and a
port of its own, stopped by a real SIGINT sent the way a terminal sends Ctrl+C.

No database of the test run is touched: each demo gets a copy of a freshly migrated SQLite file, and
DATABASE_URL and REDIS_URL are removed from its environment.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from examples.workflows import OrderFulfilment

from django_workflows.shared import processes
from tests.workers import as_a_terminal_starts_it

# CI's Django 6 pass runs this file: the demo is the running Django's migrate and runserver, and signals.
pytestmark = [pytest.mark.django_version, pytest.mark.own_project]

EXAMPLE_PROJECT = Path(__file__).resolve().parents[2] / "example_project"
BANNER_END = "Activity"  # the line after the banner: what follows is what the instances do


def demo_env(database: Path) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL", "DEMO_PORT", "PAYMENT_WEBHOOK_SECRET", "Q_LOG_LEVEL")}
    # pytest-django exports the suite's settings; the demo runs with the example project's own.
    env["DJANGO_SETTINGS_MODULE"] = "example_project.settings"
    env["SQLITE_PATH"] = str(database)
    env["DEBUG"] = "1"  # as `make demo` runs it: the example project's DEBUG is off unless asked for
    return env


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    database = tmp_path_factory.mktemp("demo") / "migrated.sqlite3"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=EXAMPLE_PROJECT,
                   env=demo_env(database), check=True, timeout=120)
    return database


@pytest.fixture
def database(migrated, tmp_path) -> Path:
    # A copy per test: migrating takes seconds, copying does not. The migrate process has exited,
    # so SQLite has folded its write-ahead log back into the file.
    database = tmp_path / "demo.sqlite3"
    shutil.copy(migrated, database)
    return database


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_time(pid: int) -> str | None:
    """The process's start time (so a reused pid is not mistaken for it), or None once it is gone."""
    try:
        fields = processes.stat_fields(pid)
    except OSError:
        return None
    # A zombie has exited: only its exit code is left.
    return None if fields[processes.STATE] in processes.EXITED else fields[processes.START_TICKS]


def parents() -> dict[int, int]:
    """{pid: parent pid} of every process."""
    return {pid: int(fields[processes.PARENT]) for pid, fields in processes.process_table().items()}


def descendants(pid: int) -> dict[int, str]:
    """{pid: start time} of every live process below ``pid``."""
    parents_ = parents()
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents_.items():
            if its_parent == parent and child not in found and (started := start_time(child)):
                found[child] = started
                frontier.append(child)
    return found


class Demo:
    """One run of the demo command, its output read as it comes."""

    def __init__(self, database: Path, port: int, *args: str, prefix: tuple[str, ...] = ()):
        # A process group of its own, as a shell gives each job: the terminal sends Ctrl+C's SIGINT
        # to the foreground job's whole group, and interrupt() does the same.
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "manage.py", "demo", "--port", str(port), *args], cwd=EXAMPLE_PROJECT,
            env=demo_env(database), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, text=True, preexec_fn=as_a_terminal_starts_it,
        )
        self.lines: list[str] = []
        self.seen: dict[int, str] = {}
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 40) -> re.Match:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                match = re.search(pattern, "".join(self.lines), re.MULTILINE)
                if match:
                    return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no {pattern!r} in the demo's output:\n{''.join(self.lines)}")
                self._changed.wait(min(left, 0.5))

    def note_processes(self) -> dict[int, str]:
        self.seen.update(descendants(self.process.pid))
        return self.seen

    def interrupt(self) -> None:
        os.killpg(self.process.pid, signal.SIGINT)

    def finish(self, timeout: float) -> int:
        returncode = self.process.wait(timeout)
        self._reader.join(5)
        return returncode

    def kill(self) -> None:
        """Whatever is left, after a failed test: the demo's group and every process it was seen to run."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)
        for pid, started in self.note_processes().items():
            if start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._reader.join(10)  # the pipe ends when the last process holding it is gone
        self.process.stdout.close()


@pytest.fixture
def run_demo(database):
    runs = []

    def run(port: int, *args: str, prefix: tuple[str, ...] = ()) -> Demo:
        runs.append(Demo(database, port, *args, prefix=prefix))
        return runs[-1]

    yield run
    for demo in runs:
        demo.kill()


def banner(demo: Demo) -> str:
    """The output up to the end of the banner (waiting for it)."""
    end = demo.wait_for(rf"^{BANNER_END}.*$").end()
    return demo.output[:end]


def assert_gone(processes: dict[int, str], demo: Demo) -> None:
    deadline = time.monotonic() + 10
    while (left := {pid for pid, started in processes.items() if start_time(pid) == started}) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running after the demo exited: {left}\n{demo.output}"


def stop_with_one_ctrl_c(demo: Demo) -> None:
    """Ctrl+C once: everything stops, promptly, cleanly and quietly."""
    processes = demo.note_processes()
    assert len(processes) >= 2, f"the worker and the web server should be running: {processes}"
    demo.interrupt()
    assert demo.finish(timeout=30) == 0, demo.output
    assert "Forced stop" not in demo.output
    assert "Traceback" not in demo.output
    assert_gone(processes, demo)


def test_one_ctrl_c_stops_everything_quietly(run_demo):
    demo = run_demo(free_port())
    start = banner(demo)
    # The banner comes after the worker's and the web server's start-up, and quiets them:
    # nothing of theirs before it to scroll it away.
    assert "[Q]" not in start and "Starting development server" not in start, start
    # Every example is named with what it shows (its docstring's first line), order-fulfilment too.
    summary = OrderFulfilment.__doc__.splitlines()[0]
    assert re.search(rf"^ +order-fulfilment +{re.escape(summary)}$", start, re.MULTILINE), start
    # Then the activity: here the end of the saga, which needs nobody.
    demo.wait_for(r"^  \d\d:\d\d:\d\d  order-saga +complete .*\"confirmed\"", timeout=20)
    stop_with_one_ctrl_c(demo)


def test_a_second_ctrl_c_forces(run_demo):
    demo = run_demo(free_port())
    banner(demo)
    processes = demo.note_processes()
    worker = next(pid for pid, parent in parents().items() if parent == demo.process.pid
                  and b"workflows_worker" in Path(f"/proc/{pid}/cmdline").read_bytes())
    # The worker's cluster frozen, as by a replay that takes its time: a graceful stop waits for it.
    for pid in descendants(worker):
        os.kill(pid, signal.SIGSTOP)
    demo.interrupt()
    demo.wait_for("^Stopping")
    time.sleep(1)
    assert demo.process.poll() is None and "Forced stop" not in demo.output, demo.output
    demo.interrupt()
    assert demo.finish(timeout=15) == 1, demo.output
    assert "Forced stop." in demo.output and "Traceback" not in demo.output, demo.output  # the worker's
    assert_gone(processes, demo)  # SIGKILL ends stopped processes too


def test_under_nohup_a_hangup_leaves_it_running(run_demo):
    demo = run_demo(free_port(), prefix=("nohup",))
    banner(demo)
    os.killpg(demo.process.pid, signal.SIGHUP)  # the terminal closing
    time.sleep(1)  # the demo looks at its signals every tenth of a second
    assert demo.process.poll() is None and "Stopping" not in demo.output, demo.output
    stop_with_one_ctrl_c(demo)


def test_the_webhook_hint_works_from_a_plain_shell(run_demo, tmp_path):
    demo = run_demo(free_port())
    hint = next(line for line in banner(demo).splitlines() if "/webhooks/payment-success/" in line).strip()
    # As from the user's shell, not the virtualenv's: its bin directory is not on PATH.
    shell = subprocess.run(["sh", "-c", hint], cwd=tmp_path, capture_output=True, text=True, timeout=30,
                           env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert shell.returncode == 0, shell
    answer = shell.stdout.replace(" ", "")
    assert '"accepted":true' in answer and '"type":"payment-success"' in answer, shell  # the API's 202
    demo.wait_for(r"^  \d\d:\d\d:\d\d  payment-race +complete .*\"paid\"", timeout=20)
    assert "[Q]" not in demo.output  # the web server took the event quietly too
    stop_with_one_ctrl_c(demo)


def test_a_quick_restart_keeps_the_port(run_demo):
    port = free_port()
    first = run_demo(port)
    banner(first)
    # A request that the server closes first: its end of the connection stays in TIME_WAIT for a
    # minute, as a browser's or curl's does after a real session.
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"GET /admin/login/ HTTP/1.0\r\nHost: localhost\r\n\r\n")
        while client.recv(65536):
            pass
    stop_with_one_ctrl_c(first)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # the situation under test: a bind without SO_REUSEADDR fails

    second = run_demo(port)
    assert f"http://127.0.0.1:{port}/admin/" in banner(second)
    stop_with_one_ctrl_c(second)


def test_a_taken_port_is_refused_loudly(run_demo):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        demo = run_demo(port)
        assert demo.finish(timeout=30) == 1, demo.output
    assert f"Port {port} " in demo.output, demo.output
    assert "--port" in demo.output and "DEMO_PORT" in demo.output, demo.output
    assert "Traceback" not in demo.output
