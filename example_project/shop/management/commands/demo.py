"""Start one instance and drive it to completion with the inline executor, printing each change."""

import time

from django.core.management.base import BaseCommand

from django_workflows import workflows
from django_workflows.executors import get_executor


class Command(BaseCommand):
    help = "Run one order-fulfilment instance end to end, in this process."

    def handle(self, *args, **options):
        instance = workflows.get("order-fulfilment").create(params={"order_id": 42, "items": ["book"]})
        self.stdout.write(f"created {instance!r}")
        executor, last = get_executor(), None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = instance.status()
            if state["status"] != last:
                self.stdout.write(f"  status: {state['status']}")
                last = state["status"]
            if state["status"] in ("complete", "errored", "terminated"):
                self.stdout.write(f"output: {state['output']}  error: {state['error']}")
                return
            executor.run_due()
            time.sleep(0.1)
        raise SystemExit("the demo instance did not finish within 30 seconds")
