"""The workflows the benchmarks run (the worker subprocesses load them too)."""

import asyncio
import time

from django_workflows import WorkflowEntrypoint


def _one():
    return 1


class BenchSteps(WorkflowEntrypoint):
    """``n`` trivial steps (params ``{"n": ...}``), then, with ``"sleep": true``, a one-hour sleep."""

    name = "bench-steps"
    step_limit = 25_000

    def run(self, event, step):
        total = 0
        for _ in range(event.payload["n"]):
            total += step.do("s", _one)
        if event.payload.get("sleep"):
            step.sleep("nap", "1 hour")
        return total


class BenchStepsAsync(WorkflowEntrypoint):
    """``bench-steps`` written as Cloudflare's Python SDK writes it: async, each step awaited."""

    name = "bench-steps-async"
    step_limit = 25_000

    async def run(self, event, step):
        total = 0
        for _ in range(event.payload["n"]):
            total += await step.do("s", _one)
        return total


class BenchStepsSideBySide(WorkflowEntrypoint):
    """``n`` trivial steps, three at a time side by side (``step.all``)."""

    name = "bench-steps-all"
    step_limit = 25_000

    def run(self, event, step):
        total = 0
        for _ in range(event.payload["n"] // 3):
            total += sum(step.all([("a", _one), ("b", _one), ("c", _one)]))
        return total


class BenchStepsAtomic(WorkflowEntrypoint):
    """``bench-steps`` with each step ``atomic=True``: its body and journal row in one transaction."""

    name = "bench-steps-atomic"
    step_limit = 25_000

    def run(self, event, step):
        total = 0
        for _ in range(event.payload["n"]):
            total += step.do("s", _one, atomic=True)
        return total


class BenchStepsGathered(WorkflowEntrypoint):
    """``n`` trivial steps, three at a time gathered (``asyncio.gather`` in an async run)."""

    name = "bench-steps-gather"
    step_limit = 25_000

    async def run(self, event, step):
        total = 0
        for _ in range(event.payload["n"] // 3):
            total += sum(await asyncio.gather(step.do("a", _one), step.do("b", _one), step.do("c", _one)))
        return total


class BenchStepsDecorated(WorkflowEntrypoint):
    """``n`` trivial steps in the Python SDK's decorator form: an async step function, awaited."""

    name = "bench-steps-decorated"
    step_limit = 25_000

    async def run(self, event, step):
        @step.do("s")
        async def one():
            return 1

        total = 0
        for _ in range(event.payload["n"]):
            total += await one()
        return total


class BenchThree(WorkflowEntrypoint):
    """Three trivial steps: the unit of throughput."""

    name = "bench-three"

    def run(self, event, step):
        a = step.do("a", _one)
        b = step.do("b", lambda: a + 1)
        return step.do("c", lambda: a + b)


class BenchWaiter(WorkflowEntrypoint):
    """Waits for an event, then journals the wall-clock time at which it resumed."""

    name = "bench-waiter"

    def run(self, event, step):
        step.wait_for_event("go", "go", timeout="1 hour")
        return step.do("at", time.time)


class BenchTimer(WorkflowEntrypoint):
    """Sleeps until ``params["until"]`` (epoch seconds), then journals the time at which it woke."""

    name = "bench-timer"

    def run(self, event, step):
        step.sleep_until("nap", event.payload["until"])
        return step.do("at", time.time)


class BenchNapper(WorkflowEntrypoint):
    """Sleeps for a day, then one step (the idle test bulk-inserts these, asleep)."""

    name = "bench-napper"

    def run(self, event, step):
        step.sleep("nap", "1 day")
        return step.do("after", time.time)


def _scheduled_run(self, event, step):
    return event.payload


# BENCH_SCHEDULES=N declares N workflows with two cron schedules each (04:MM on 1 January and 1 July,
# in Paris: not due while a benchmark runs), so that the idle cost (part 7) can be measured with
# schedules declared: an idle worker should ask nothing more for them.
for _n in range(int(__import__("os").environ.get("BENCH_SCHEDULES", "0"))):
    type(f"BenchScheduled{_n}", (WorkflowEntrypoint,), {
        "name": f"bench-scheduled-{_n}", "schedules": [f"{_n % 60} 4 1 1 *", f"{_n % 60} 4 1 7 *"],
        "schedule_timezone": "Europe/Paris", "run": _scheduled_run, "__module__": __name__,
    })


# BENCH_LIMITS=N declares N workflows with a concurrency limit and a rate limit each, so that the idle
# cost can be measured with limits declared too: limits act in the claim, and an idle worker claims
# nothing.
for _n in range(int(__import__("os").environ.get("BENCH_LIMITS", "0"))):
    type(f"BenchLimited{_n}", (WorkflowEntrypoint,), {
        "name": f"bench-limited-{_n}", "concurrency": 10, "rate_limit": "100/minute",
        "run": _scheduled_run, "__module__": __name__,
    })


class BenchApproval(WorkflowEntrypoint):
    """Waits for a person's approval (the admin's approval queue), then one step. The scale benchmark
    loads instances of it."""

    name = "bench-approval"
    approvals = {"approval"}

    def run(self, event, step):
        step.wait_for_event("wait", "approval", timeout="7 days")
        return step.do("s", _one)
