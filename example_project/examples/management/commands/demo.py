"""The whole system on one machine: an admin user, a worker, a web server, one instance of each example.

    python manage.py demo                       # runs until Ctrl+C (once stops gracefully, twice forces)
    python manage.py demo --exit-when-settled   # approves the payment through the API, exits when all settle
    python manage.py demo -v 2                  # with the worker's and the web server's own logs

The banner (where to look, the credentials, the commands to try) comes once the worker and the web
server are up, with their start-up logs and the cluster's line per task left out, so that it is the
last thing on the screen before the activity: a line per change of each instance's state.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from django_workflows import workflows
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import registry
from django_workflows.models import Instance, WorkerHeartbeat

# What each example instance should end as (for --exit-when-settled).
EXPECTED = {
    "document-pipeline": ("complete", {"status": None}),
    "payment-approval": ("complete", {"status": "charged"}),
    "order-saga": ("complete", {"status": "confirmed"}),
    "payment-race": ("complete", {"status": "paid"}),
    "flaky-step": ("complete", None),
    "plain-sleep": ("complete", None),
    "order-fulfilment": ("complete", None),
    "python-dag": ("complete", None),
}


MANAGE_PY = Path(__file__).resolve().parents[3] / "manage.py"

# The signals that ask the demo to stop: Ctrl+C, kill, and the terminal closing.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """A stop was asked while the demo was starting or running: unwinds to the stop of the children."""


def _die_with_the_demo():
    """For preexec_fn: the child gets SIGTERM (a graceful stop) when the demo dies, however it dies.

    The children run in sessions of their own (see Command.spawn), so neither Ctrl+C nor the terminal
    closing reaches them: without this, a demo killed with SIGKILL would leave them running. Linux
    only; elsewhere a demo killed that way leaves them to be stopped by hand.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    demo = os.getpid()
    pr_set_pdeathsig = 1

    def preexec():
        prctl(pr_set_pdeathsig, ctypes.c_ulong(signal.SIGTERM), ctypes.c_ulong(0), ctypes.c_ulong(0),
              ctypes.c_ulong(0))
        if os.getppid() != demo:
            os._exit(1)  # the demo died before the request took effect

    return preexec


def check_port(port: int) -> int:
    """``port`` if the web server can listen on it (a free one for 0), else a CommandError saying what to do.

    The probe binds as runserver does, with SO_REUSEADDR: the connections of a demo stopped a moment
    ago, left in TIME_WAIT for a minute, do not keep the port from it; a program listening there does.
    The port asked for is the one used, or none: a demo that moved to another port would leave the
    user's bookmarks and the curl commands they kept pointing at something else.
    """
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise CommandError(
                f"Port {port} on 127.0.0.1 is not available ({exc.strerror}): another program, or another "
                "demo, listens there. Stop it, or give the demo another port: "
                f"make demo DEMO_PORT={port + 1}, or manage.py demo --port {port + 1} "
                "(--port 0 takes any free port)."
            ) from None
        return probe.getsockname()[1]


def webhook_command(base: str, race_id: str) -> str:
    """A shell command that signs a payment-success webhook for the race and posts it with curl.

    It signs when it runs (a signature carries its time, and is refused after
    WEBHOOK_TOLERANCE_SECONDS), with this very Python by its absolute path: the user's shell has
    neither the virtualenv's python on its PATH nor, in its own python, django_workflows.
    """
    python = os.path.normpath(os.path.abspath(sys.executable))  # not resolved: a venv's python is a symlink
    secret = workflow_settings.WEBHOOK_SECRETS["payment-race"]
    signer = ("import sys; from django_workflows.webhooks import sign; "
              "print(sign(sys.argv[1], sys.argv[2].encode()))")
    body = json.dumps({"payment_id": "pay_1"})
    return (
        f"body={shlex.quote(body)}; curl -sS -w '\\n' -X POST "
        f"{base}/workflows/payment-race/instances/{race_id}/webhooks/payment-success/ "
        "-H 'Content-Type: application/json' -H 'X-Workflows-Source: demo' "
        f'-H "X-Workflows-Signature: $({shlex.quote(python)} -c {shlex.quote(signer)} {shlex.quote(secret)} '
        '"$body")" -d "$body"'
    )


def describe_state(row: dict) -> str:
    """An instance's state in a line: its status, and what it waits for or what it ended with."""
    status = row["status"]
    if status == "waiting":
        if row["waiting_for"]:
            return f"waiting for {' or '.join(row['waiting_for'])}"
        until = f" until {row['wake_at'].astimezone():%H:%M:%S}" if row["wake_at"] else ""
        return f"waiting{until} (step {row['current_step']})"
    if status == "complete":
        output = json.dumps(row["output"])
        return f"complete {output if len(output) <= 90 else output[:89] + '…'}"
    if status == "errored":
        error = row["error"] or {}
        return f"errored {error.get('name')}: {error.get('message')}"
    return status


class Command(BaseCommand):
    help = "Start a worker and a web server, one instance of each example workflow, and show where to look."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)),
                            help="The web server's port (default: DEMO_PORT, or 8000); 0 takes any free one.")
        parser.add_argument("--exit-when-settled", action="store_true",
                            help="Approve the payment through the API, then exit once every instance settled.")
        parser.add_argument("--timeout", type=float, default=120, help="With --exit-when-settled: give up after this.")

    def handle(self, *args, port, exit_when_settled, timeout, verbosity, **options):
        self.children: dict[subprocess.Popen, str] = {}
        self.signals = 0
        self.stopping = False
        self.quiet = verbosity < 2
        for signum in STOP_SIGNALS:
            # One ignored stays ignored: SIGHUP under nohup, SIGINT in a job a script put in the background.
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, self.on_signal)
        try:
            self.run(port, exit_when_settled, timeout)
        except Interrupted:
            pass
        finally:
            forced = self.stop_children()
        if forced:
            raise SystemExit(1)

    def run(self, port: int, exit_when_settled: bool, timeout: float) -> None:
        started = time.monotonic()
        port = check_port(port)
        user, password = self.admin_user()
        token = Token.objects.get_or_create(user=user)[0].key
        base = f"http://127.0.0.1:{port}"
        if self.quiet:
            from django_q.conf import logger as q_logger  # configured (to INFO) on import: import it first

            q_logger.setLevel(logging.WARNING)  # this process's "Enqueued" line per instance
        # The cluster logs at INFO a line per task it takes and one per task done: a dozen lines a
        # second while the examples run, which would scroll the banner away; and the web server an
        # "Enqueued" line per event the API takes. Warnings still show.
        env = {**os.environ, "Q_LOG_LEVEL": "WARNING"} if self.quiet else None
        worker = self.spawn("the worker", "workflows_worker", "--workers", "2", env=env)
        # runserver's stdout has only its start-up banner; requests and errors go to stderr.
        server = self.spawn("the web server", "runserver", f"127.0.0.1:{port}", "--noreload", env=env,
                            stdout=subprocess.DEVNULL if self.quiet else None)
        self.wait_for_server(server, port)
        self.wait_for_worker(worker)
        instances = self.start_instances()
        self.banner(f"Up in {time.monotonic() - started:.1f} s.", base, password, token, instances)
        if exit_when_settled:
            self.settle(base, token, instances, timeout)
            return
        self.watch(instances)

    def banner(self, up: str, base: str, password: str, token: str, instances: dict) -> None:
        write = self.stdout.write
        write(self.style.SUCCESS(f"\n{up}\n"))
        write(f"  Admin:     {base}/admin/   (user admin, password {password})")
        write(f"  API:       {base}/workflows/   (token {token})\n")
        # What each example shows, from its docstring: the line the admin's list of workflows shows too.
        write("  One instance of each example (example_project/examples/workflows.py):")
        width = max(map(len, instances))
        for name in instances:
            write(f"    {name:<{width}}  {(registry.get(name).__doc__ or '').strip().splitlines()[0]}")
        write("\n  Approve the payment through the API:\n")
        payment = instances["payment-approval"].id
        write(f"    curl -X POST {base}/workflows/payment-approval/instances/{payment}"
              f"/events/manager-approval/ -H 'Authorization: Token {token}' "
              "-H 'Content-Type: application/json' -d '{\"outcome\": \"approved\"}'\n")
        tolerance = workflow_settings.WEBHOOK_TOLERANCE_SECONDS
        write("  Win the payment race with a webhook, signed as a payment provider signs it (the command")
        write(f"  signs when you run it: a signature is good for {tolerance} s):\n")
        write(f"    {webhook_command(base, instances['payment-race'].id)}\n")
        more = "" if self.quiet else "; above and below, the worker's and the web server's logs"
        write(f"Activity (Ctrl+C stops the demo{more}):")
        self.stdout.flush()

    # The children and the signals.

    def on_signal(self, signum, frame) -> None:
        # Only counted here: the loops look at the count (pause), so no exception is raised at an
        # arbitrary point of the demo, in the middle of a write to the database say.
        self.signals += 1

    def pause(self, seconds: float) -> None:
        """Sleep, unless a stop was asked (then raise Interrupted, within a tenth of a second)."""
        deadline = time.monotonic() + seconds
        while True:
            if self.signals and not self.stopping:
                raise Interrupted
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    def spawn(self, what: str, *args: str, **popen) -> subprocess.Popen:
        # A session of its own: Ctrl+C makes the terminal send SIGINT to its whole foreground process
        # group. Were the worker in it, it would get that SIGINT and then the demo's SIGTERM: two
        # signals, which the worker takes as the order to force its stop. The demo alone gets the
        # signal and passes it on, once.
        child = subprocess.Popen([sys.executable, str(MANAGE_PY), *args], stdin=subprocess.DEVNULL,
                                 start_new_session=True, preexec_fn=_die_with_the_demo(), **popen)
        self.children[child] = what
        return child

    def check_children(self) -> None:
        for child, what in self.children.items():
            if child.poll() is not None:
                raise CommandError(f"{what} exited with code {child.returncode}: see its output above")

    def alive(self) -> list[subprocess.Popen]:
        return [child for child in self.children if child.poll() is None]

    def stop_children(self) -> bool:
        """Stop the children gracefully: one SIGTERM each (the worker finishes its current replays).

        A second signal to the demo, or a minute gone by, forces: each child left gets a second
        SIGTERM (the worker then kills its cluster and exits); a third signal, or ten more seconds,
        SIGKILLs what is left. Returns whether the stop was forced.
        """
        self.stopping = True
        if not self.alive():
            return False
        if self.signals:
            try:
                self.stdout.write("Stopping the worker and the web server; Ctrl+C again forces.")
                self.stdout.flush()
            except OSError:
                pass  # the terminal is gone (SIGHUP): stop them all the same
        for child in self.alive():
            child.send_signal(signal.SIGTERM)
        forced, deadline = False, time.monotonic() + 60
        while self.alive():
            if not forced and (self.signals >= 2 or time.monotonic() > deadline):
                forced, deadline = True, time.monotonic() + 10
                for child in self.alive():
                    child.send_signal(signal.SIGTERM)
            elif forced and (self.signals >= 3 or time.monotonic() > deadline):
                for child in self.alive():
                    child.kill()
            time.sleep(0.1)
        return forced

    def admin_user(self):
        users = get_user_model()
        password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(9)
        user = users.objects.filter(username="admin").first()
        if user is None:
            user = users.objects.create_superuser("admin", "admin@example.com", password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        return user, password

    def wait_for_server(self, server: subprocess.Popen, port: int) -> None:
        # A connection without a request: runserver accepts connections once it serves the project,
        # and one that sends nothing is not logged.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            # Exited: it printed why (a port taken since check_port looked, say). Stop rather than
            # wait for an answer that will not come, or that would come from another program.
            self.check_children()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return
            except OSError:
                self.pause(0.2)
        raise CommandError(f"the web server did not listen on port {port} within 30 s")

    def wait_for_worker(self, worker: subprocess.Popen) -> None:
        # Up once its django-q2 cluster answered the probe the worker sends it on starting: after
        # the cluster's start-up logs, which the banner must follow.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.check_children()
            if WorkerHeartbeat.objects.filter(pid=worker.pid, hostname=socket.gethostname(),
                                              probe_answered_at__isnull=False).exists():
                return
            self.pause(0.2)
        raise CommandError("the worker's cluster took no task within 60 s")

    def start_instances(self) -> dict:
        params = {
            "document-pipeline": {"url": "https://example.com/report.pdf", "email": "team@example.com"},
            "payment-approval": {"user_id": 7, "amount": 120, "currency": "EUR"},
            "order-saga": {"order_id": 42, "items": ["book", "lamp"], "amount": 59},
            "payment-race": {"order_id": 43},
            "flaky-step": {},
            "plain-sleep": {"duration": "5 seconds"},
            "order-fulfilment": {"order_id": 44, "items": ["mug"]},
            "python-dag": {},
        }
        return {name: workflows.get(name).create(params=value) for name, value in params.items()}

    def watch(self, instances: dict) -> None:
        """A line per change of an instance's state, until a stop is asked or a child dies."""
        names = {instance.id: name for name, instance in instances.items()}
        width = max(map(len, instances))
        shown: dict[str, str] = {}
        while True:
            rows = Instance.objects.filter(instance_id__in=names).order_by("created_at").values(
                "instance_id", "workflow_name", "status", "current_step", "waiting_for", "wake_at", "output",
                "error")
            states = {names[row["instance_id"]]: describe_state(row) for row in rows
                      if row["workflow_name"] == names[row["instance_id"]]}
            for name, state in states.items():
                # Queued is where each starts, as the banner said: only what comes after is news.
                if shown.get(name, "queued") != state:
                    shown[name] = state
                    self.stdout.write(f"  {time.strftime('%H:%M:%S')}  {name:<{width}}  {state}")
            self.stdout.flush()
            self.check_children()
            self.pause(0.5)

    def api(self, base: str, token: str, path: str, body=None, headers=None):
        request = urllib.request.Request(
            f"{base}{path}", method="POST" if body is not None else "GET",
            data=body if isinstance(body, bytes) or body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json", **(headers or {})},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")

    def settle(self, base: str, token: str, instances: dict, timeout: float) -> None:
        from django_workflows.webhooks import sign

        deadline = time.monotonic() + timeout
        payment, race = instances["payment-approval"], instances["payment-race"]
        self.wait(lambda: payment.status()["status"] == "waiting", deadline, "the payment to wait for approval")
        self.stdout.write("payment-approval is waiting for approval; approving it through the API")
        status, _ = self.api(base, token, f"/workflows/payment-approval/instances/{payment.id}/events/manager-approval/",
                             {"outcome": "approved", "comment": "fine by me"})
        if status != 202:
            raise CommandError(f"the API answered {status} to the approval")
        self.wait(lambda: race.status()["status"] == "waiting", deadline, "the race to wait for its webhooks")
        body = json.dumps({"payment_id": "pay_1"}).encode()
        secret = workflow_settings.WEBHOOK_SECRETS["payment-race"]
        status, _ = self.api(base, token, f"/workflows/payment-race/instances/{race.id}/webhooks/payment-success/",
                             body, {"X-Workflows-Signature": sign(secret, body),
                                    "X-Workflows-Source": "demo"})
        if status != 202:
            raise CommandError(f"the API answered {status} to the webhook")
        for name, (wanted, output) in EXPECTED.items():
            instance = instances[name]
            self.wait(lambda i=instance, w=wanted: i.status()["status"] == w, deadline, f"{name} to be {wanted}")
            state = instance.status()
            if output and output["status"] and state["output"].get("status") != output["status"]:
                raise CommandError(f"{name} ended with {state['output']}, expected status {output['status']}")
            self.stdout.write(f"  {name}: {state['status']} {json.dumps(state['output'])}")
        self.stdout.write(self.style.SUCCESS("Every example instance settled as expected."))

    def wait(self, predicate, deadline: float, what: str) -> None:
        while time.monotonic() < deadline:
            if predicate():
                return
            self.pause(0.2)
        raise CommandError(f"timed out waiting for {what}")
