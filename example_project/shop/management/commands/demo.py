"""Start a worker, run one instance end to end through it, printing each change, then stop the worker."""

import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand

from django_workflows import workflows


class Command(BaseCommand):
    help = "Run one order-fulfilment instance end to end through a real workflows_worker."

    def handle(self, *args, **options):
        worker = subprocess.Popen([sys.executable, "manage.py", "workflows_worker", "--workers", "1"])
        try:
            instance = workflows.get("order-fulfilment").create(params={"order_id": 42, "items": ["book"]})
            self.stdout.write(f"created {instance!r}")
            last, deadline = None, time.monotonic() + 60
            while time.monotonic() < deadline:
                state = instance.status()
                if state["status"] != last:
                    self.stdout.write(f"  status: {state['status']}")
                    last = state["status"]
                if state["status"] in ("complete", "errored", "terminated"):
                    self.stdout.write(f"output: {state['output']}  error: {state['error']}")
                    return
                time.sleep(0.1)
            raise SystemExit("the demo instance did not finish within 60 seconds")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
