"""Workflows with keyed limits, priorities and queues (tests/integration/test_flow_control.py and
tests/system/test_flow_control.py)."""

import time

from django_workflows import WorkflowEntrypoint


class PerCustomer(WorkflowEntrypoint):
    """One instance per customer at a time, across every worker."""

    concurrency = {"limit": 1, "key": "params.customer_id"}

    def run(self, event, step):
        # Long enough that two replays of one customer would overlap if the limit let them.
        step.do("work", lambda: time.sleep(event.payload.get("seconds", 0)) or 1)
        return step.do("done", lambda: event.payload["customer_id"])


class PerTenant(WorkflowEntrypoint):
    """Two per tenant at once, the tenant a tag; and a start a minute per tenant."""

    concurrency = {"limit": 2, "key": "tags.tenant"}
    rate_limit = {"limit": "1/minute", "key": "tags.tenant"}

    def run(self, event, step):
        return step.do("one", lambda: 1)


def region_of(params, tags):
    return f"{params['country']}-{tags.get('tier', 'free')}"


class PerRegion(WorkflowEntrypoint):
    """Keyed by a callable of the params and the tags, beside a rate limit of the whole workflow."""

    concurrency = {"limit": 1, "key": region_of}
    rate_limit = "1000/minute"

    def run(self, event, step):
        return step.do("one", lambda: 1)


class Errand(WorkflowEntrypoint):
    """One short step: what priorities order."""

    def run(self, event, step):
        return step.do("one", lambda: time.sleep(event.payload.get("seconds", 0) if event.payload else 0) or 1)


class Urgent(WorkflowEntrypoint):
    """A class whose instances have priority 7 unless create() says otherwise."""

    priority = 7

    def run(self, event, step):
        return step.do("one", lambda: 1)


class HeavyLifting(WorkflowEntrypoint):
    """Routed to the 'heavy' queue: only workers started with --queues heavy run it."""

    queue = "heavy"

    def run(self, event, step):
        return step.do("lift", lambda: 1)
