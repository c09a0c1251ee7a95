"""The whole system on one machine: an admin user, a worker, a web server, one instance of each example.

    python manage.py demo                       # runs until Ctrl+C
    python manage.py demo --exit-when-settled   # approves the payment through the API, exits when all settle
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from django_workflows import workflows

# What each example instance should end as (for --exit-when-settled).
EXPECTED = {
    "document-pipeline": ("complete", {"status": None}),
    "payment-approval": ("complete", {"status": "charged"}),
    "order-saga": ("complete", {"status": "confirmed"}),
    "payment-race": ("complete", {"status": "paid"}),
    "flaky-step": ("complete", None),
    "plain-sleep": ("complete", None),
}


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise CommandError("no free port for the web server")


class Command(BaseCommand):
    help = "Start a worker and a web server, one instance of each example workflow, and show where to look."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)))
        parser.add_argument("--exit-when-settled", action="store_true",
                            help="Approve the payment through the API, then exit once every instance settled.")
        parser.add_argument("--timeout", type=float, default=120, help="With --exit-when-settled: give up after this.")

    def handle(self, *args, port, exit_when_settled, timeout, **options):
        started = time.monotonic()
        user, password = self.admin_user()
        token = Token.objects.get_or_create(user=user)[0].key
        port = free_port(port)
        base = f"http://127.0.0.1:{port}"
        children = [
            subprocess.Popen([sys.executable, "manage.py", "workflows_worker", "--workers", "2"]),
            subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]),
        ]
        try:
            self.wait_for_server(base)
            instances = self.start_instances()
            payment_id = instances["payment-approval"].id
            race_id = instances["payment-race"].id
            self.stdout.write(self.style.SUCCESS(f"\nUp in {time.monotonic() - started:.1f} s.\n"))
            self.stdout.write(f"  Admin:     {base}/admin/   (user admin, password {password})")
            self.stdout.write(f"  API:       {base}/workflows/   (token {token})")
            self.stdout.write("  Approve the payment through the API:\n")
            self.stdout.write(
                f"    curl -X POST {base}/workflows/payment-approval/instances/{payment_id}/events/manager-approval/ "
                f"-H 'Authorization: Token {token}' -H 'Content-Type: application/json' "
                "-d '{\"outcome\": \"approved\"}'\n"
            )
            self.stdout.write("  Win the payment race with a signed webhook:\n")
            self.stdout.write(
                "    python -c \"from django_workflows.webhooks import sign; print(sign('demo-webhook-secret', "
                "b'{\\\"id\\\": 1}'))\"   # then POST the body with X-Workflows-Signature to "
                f"{base}/workflows/payment-race/instances/{race_id}/webhooks/payment-success/\n"
            )
            if exit_when_settled:
                self.settle(base, token, instances, timeout)
                return
            self.stdout.write("Press Ctrl+C to stop.")
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            for child in children:
                child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(30)
                except subprocess.TimeoutExpired:
                    child.kill()

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

    def wait_for_server(self, base: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{base}/admin/login/", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        raise CommandError(f"the web server did not answer at {base} within 30 s")

    def start_instances(self) -> dict:
        params = {
            "document-pipeline": {"url": "https://example.com/report.pdf", "email": "team@example.com"},
            "payment-approval": {"user_id": 7, "amount": 120, "currency": "EUR"},
            "order-saga": {"order_id": 42, "items": ["book", "lamp"], "amount": 59},
            "payment-race": {"order_id": 43},
            "flaky-step": {},
            "plain-sleep": {"duration": "5 seconds"},
        }
        instances = {}
        for name, value in params.items():
            instances[name] = workflows.get(name).create(params=value)
            self.stdout.write(f"  started {name} {instances[name].id}")
        return instances

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
        status, _ = self.api(base, token, f"/workflows/payment-race/instances/{race.id}/webhooks/payment-success/",
                             body, {"X-Workflows-Signature": sign("demo-webhook-secret", body),
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
            time.sleep(0.2)
        raise CommandError(f"timed out waiting for {what}")
