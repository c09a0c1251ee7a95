"""Workflows the test suite runs. Their behaviour is steered by params, and every step body
counts its calls in ``calls``, so tests can tell a step that ran from one answered by the journal."""

import asyncio
from collections import Counter

from django_workflows import NonRetryableError, WorkflowEntrypoint, WorkflowTimeoutError

calls: Counter = Counter()


class PaymentDeclined(Exception):
    pass


class ThreeSteps(WorkflowEntrypoint):
    def run(self, event, step):
        a = step.do("a", lambda: calls.update(["a"]) or 1)

        @step.do("b")
        def b():
            calls.update(["b"])
            return {"a": a, "b": 2}

        result = b()
        c = step.do("c", lambda: calls.update(["c"]) or [a, result["b"], 3])
        return {"sum": sum(c), "b": result, "params": event.payload}


class ReturnsItsLastStep(WorkflowEntrypoint):
    """Three steps, run() returning the last one's result: nothing of its own runs after it."""

    def run(self, event, step):
        a = step.do("a", lambda: calls.update(["a"]) or 1)
        b = step.do("b", lambda: calls.update(["b"]) or a + 1)
        return step.do("c", lambda: calls.update(["c"]) or a + b)


class LooksAfterItsLastStep(WorkflowEntrypoint):
    """Reads, after its last step, whether that step's row is in the journal already."""

    def run(self, event, step):
        step.do("a", lambda: 1)
        last = step.do("b", lambda: 2)
        from django_workflows.models import Step

        return {"b": last, "journaled": list(Step.objects.filter(instance__instance_id=event.instance_id)
                                             .values_list("key", flat=True).order_by("id"))}


class Flaky(WorkflowEntrypoint):
    """Fails ``failures`` times, then succeeds; retries as ``config`` says."""

    def run(self, event, step):
        failures = event.payload.get("failures", 2)

        def attempt():
            calls.update(["flaky"])
            if calls["flaky"] <= failures:
                raise ValueError(f"failure {calls['flaky']}")
            return "ok"

        return step.do("flaky", attempt, config=event.payload.get("config"))


class NonRetryable(WorkflowEntrypoint):
    def run(self, event, step):
        def charge():
            calls.update(["charge"])
            raise PaymentDeclined("card declined")

        def refuse():
            calls.update(["refuse"])
            raise NonRetryableError("not today")

        outcome = []
        try:
            step.do("charge", charge, config={"retries": {"limit": 2, "delay": "1 second"}})
        except PaymentDeclined as exc:
            outcome.append(["declined", str(exc)])
            step.do("compensate", lambda: calls.update(["compensate"]) or "refunded")
        try:
            step.do("refuse", refuse)
        except NonRetryableError as exc:
            outcome.append(["refused", str(exc)])
        return outcome


class Uncaught(WorkflowEntrypoint):
    def run(self, event, step):
        def boom():
            calls.update(["boom"])
            raise RuntimeError("it broke")

        step.do("boom", boom, config={"retries": {"limit": 0}})


class Sleeper(WorkflowEntrypoint):
    def run(self, event, step):
        step.do("before", lambda: calls.update(["before"]) or "before")
        if "until" in event.payload:
            step.sleep_until("nap", event.payload["until"])
        else:
            step.sleep("nap", event.payload.get("duration", "1 hour"))
        return step.do("after", lambda: calls.update(["after"]) or "after")


class Approval(WorkflowEntrypoint):
    approvals = {"manager-approval"}

    def run(self, event, step):
        step.do("ask", lambda: calls.update(["ask"]) or "asked")
        try:
            decision = step.wait_for_event("approval", "manager-approval", timeout="72 hours")
        except WorkflowTimeoutError:
            step.do("expire", lambda: calls.update(["expire"]) or "expired")
            return {"status": "expired"}
        return {"status": decision.payload["outcome"], "type": decision.type,
                "at": decision.timestamp.isoformat()}


class Refund(WorkflowEntrypoint):
    """Declared events: a manager approves (with a permission of their own), the provider confirms
    the settlement by a signed webhook, and anyone allowed to send events may add a note."""

    events = {
        "manager-approval": {
            "permission": "testapp.approve_refund",
            "approval": True,
            "schema": {"type": "object", "required": ["outcome"], "additionalProperties": False,
                       "properties": {"outcome": {"enum": ["approved", "rejected"]},
                                      "comment": {"type": "string", "maxLength": 500}}},
        },
        "refund-settled": {
            "webhook": True,
            "schema": {"type": "object", "required": ["amount"],
                       "properties": {"amount": {"type": "number", "minimum": 0}}},
        },
        "note": {},
    }

    def run(self, event, step):
        decision = step.wait_for_event("approval", "manager-approval", timeout="72 hours")
        if decision.payload["outcome"] != "approved":
            return {"refunded": False}
        settled = step.wait_for_event("settlement", "refund-settled", timeout="72 hours")
        return {"refunded": True, "amount": settled.payload["amount"]}


class Race(WorkflowEntrypoint):
    def run(self, event, step):
        first = step.wait_for_event("payment", ["payment-success", "payment-failure"], timeout="4 hours")
        return {"type": first.type, "payload": first.payload}


class TwoWaits(WorkflowEntrypoint):
    def run(self, event, step):
        one = step.wait_for_event("first", "tick", timeout="1 hour")
        two = step.wait_for_event("second", "tick", timeout="1 hour")
        return [one.payload, two.payload]


class Loop(WorkflowEntrypoint):
    def run(self, event, step):
        total = 0
        for i in range(event.payload["n"]):
            total += step.do("item", lambda i=i: calls.update(["item"]) or i)
        if event.payload.get("then_sleep"):
            step.sleep("rest", "1 hour")
        return total


class Limited(WorkflowEntrypoint):
    step_limit = 3

    def run(self, event, step):
        for _ in range(event.payload.get("n", 5)):
            step.sleep("free", 0)
            step.do("s", lambda: calls.update(["s"]))
        return "done"


class SwallowsEverything(WorkflowEntrypoint):
    """A user's ``except Exception:`` around waiting steps must not swallow the suspension."""

    def run(self, event, step):
        try:
            step.sleep("nap", "1 hour")
        except Exception:
            calls.update(["swallowed"])
        try:
            step.wait_for_event("approval", "go", timeout="1 hour")
        except WorkflowTimeoutError:
            return "timed out"
        except Exception:
            calls.update(["swallowed"])
        return "went"


class Shifty(WorkflowEntrypoint):
    """Calls a sleep where an earlier replay called a do: not deterministic."""

    def run(self, event, step):
        if calls["shifty-replays"] == 0:
            calls.update(["shifty-replays"])
            step.do("x", lambda: 1)
            step.sleep("wait", "1 hour")
        else:
            try:
                step.sleep("x", "1 second")
            except Exception:
                calls.update(["caught"])
            return "should not complete"


class BadResult(WorkflowEntrypoint):
    def run(self, event, step):
        kind = event.payload["kind"]
        if kind == "object":
            return step.do("bad", lambda: object())
        if kind == "big":
            return step.do("big", lambda: "x" * (event.payload["size"]))
        if kind == "nan":
            return step.do("nan", lambda: float("nan"))
        if kind == "output":
            return {"made": object()}
        return step.do("tuple", lambda: (1, 2))


class BadConfig(WorkflowEntrypoint):
    def run(self, event, step):
        return step.do("configured", lambda: 1, config=event.payload["config"])


class BadCall(WorkflowEntrypoint):
    def run(self, event, step):
        what = event.payload["what"]
        if what == "sleep":
            step.sleep("nap", event.payload["value"])
        elif what == "sleep_until":
            step.sleep_until("nap", event.payload["value"])
        elif what == "wait":
            step.wait_for_event("w", event.payload["value"])
        elif what == "wait_timeout":
            step.wait_for_event("w", "ok", timeout=event.payload["value"])
        elif what == "name":
            step.do(event.payload["value"], lambda: 1)
        elif what == "fn":
            step.do("x", "not callable")
        return "unreachable"


class Slow(WorkflowEntrypoint):
    """An attempt that outlives its timeout is failed and retried."""

    def run(self, event, step):
        import time

        def slow():
            calls.update(["slow"])
            if calls["slow"] == 1:
                give_up = time.monotonic() + 5
                while time.monotonic() < give_up:  # busy Python code: interruptible
                    pass
            return "fast enough"

        return step.do("slow", slow, config={"timeout": "200 milliseconds",
                                             "retries": {"limit": 1, "delay": "1 second"}})


class Pausable(WorkflowEntrypoint):
    def run(self, event, step):
        from django_workflows import workflows

        def first():
            calls.update(["first"])
            if event.payload.get("pause_self"):
                workflows.get("pausable").get(event.instance_id).pause()
            return 1

        step.do("first", first)
        step.do("second", lambda: calls.update(["second"]) or 2)
        return "done"


class Terminator(WorkflowEntrypoint):
    def run(self, event, step):
        from django_workflows import workflows

        def first():
            calls.update(["first"])
            workflows.get("terminator").get(event.instance_id).terminate()
            return 1

        step.do("first", first)
        step.do("second", lambda: calls.update(["second"]) or 2)
        return "done"


class Spawner(WorkflowEntrypoint):
    """Creates another instance from a step: the child's replay must not run inside the parent's."""

    def run(self, event, step):
        from django_workflows import workflows

        step.do("spawn", lambda: workflows.get("three-steps").create(id=f"child-of-{event.instance_id}").id)
        return "spawned"


class ReadOnlyEvent(WorkflowEntrypoint):
    def run(self, event, step):
        try:
            event.payload = {"changed": True}
        except AttributeError as exc:
            return {"refused": type(exc).__name__, "instance_id": event.instance_id,
                    "workflow_name": event.workflow_name, "has_timestamp": event.timestamp is not None}
        return "mutable"


# Workflows for the tests that run real worker processes: their side effects are counted in the
# database (SideEffect), since the steps run in other processes.


def _bump(name):
    from tests.testapp.models import SideEffect

    return SideEffect.bump(name)


class Napper(WorkflowEntrypoint):
    def run(self, event, step):
        import time

        step.sleep("nap", event.payload.get("duration", "2 seconds"))
        return step.do("woke", lambda: {"at": time.time()})


class Awaiter(WorkflowEntrypoint):
    def run(self, event, step):
        import time

        got = step.wait_for_event("go", "go", timeout="1 hour")
        return step.do("resumed", lambda: {"at": time.time(), "payload": got.payload})


def _hang_once(marker: str, name: str) -> str:
    """The first run records its process id in ``marker`` and hangs until that process is killed."""
    import os
    import time

    if _bump(name) == 1:
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        for _ in range(600):
            time.sleep(0.1)
    return "survived"


class Crashable(WorkflowEntrypoint):
    """Its middle step, the first time, records its process id and hangs until that process is killed."""

    def run(self, event, step):
        marker = event.payload["marker"]
        step.do("before", lambda: _bump(f"{event.instance_id}:before"))

        step.do("victim", lambda: _hang_once(marker, f"{event.instance_id}:victim"),
                config={"retries": {"limit": 0}})
        if event.payload.get("then_sleep"):
            step.sleep("nap", "1 second")
        step.do("after", lambda: _bump(f"{event.instance_id}:after"))
        return "done"


class CrashableAll(WorkflowEntrypoint):
    """Three steps side by side (step.all); the middle one, the first time, records its process id and
    hangs until that process is killed."""

    def run(self, event, step):
        marker, iid = event.payload["marker"], event.instance_id
        step.do("before", lambda: _bump(f"{iid}:before"))

        def victim():
            return _hang_once(marker, f"{iid}:victim")

        results = step.all([("left", lambda: _bump(f"{iid}:left")), ("victim", victim, {"retries": {"limit": 0}}),
                            ("right", lambda: _bump(f"{iid}:right"))])
        step.do("after", lambda: _bump(f"{iid}:after"))
        return results


def _die(marker: str) -> None:
    """Leave ``marker`` behind, then SIGKILL this process: nothing after it runs, not even a rollback."""
    import os
    import signal

    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


def _die_at_the_journal_row(marker: str):
    """A connection execute wrapper that kills the process as the step's journal row is written: after
    the body, before the commit of an atomic step (and after the body's own commits in a plain one)."""
    from django_workflows.models import Step

    def wrapper(execute, sql, params, many, context):
        if sql.startswith("INSERT INTO") and Step._meta.db_table in sql:
            _die(marker)
        return execute(sql, params, many, context)

    return wrapper


class KilledAtomic(WorkflowEntrypoint):
    """One step that writes to the database, its process SIGKILLed the first time at the point params
    name: "before" the body writes, "during" the body (after its write), "before commit" (as its journal
    row is written) or "after commit"."""

    def run(self, event, step):
        import os

        from django.db import connection, transaction

        point, marker, iid = event.payload["point"], event.payload["marker"], event.instance_id

        def body():
            killed = os.path.exists(marker)
            if not killed and point == "before":
                _die(marker)
            count = _bump(f"{iid}:body")
            if not killed and point == "during":
                _die(marker)
            if not killed and point == "before commit":
                connection.execute_wrappers.append(_die_at_the_journal_row(marker))
            if not killed and point == "after commit":
                transaction.on_commit(lambda: _die(marker))
            return count

        written = step.do("write", body, atomic=event.payload["atomic"], config={"retries": {"limit": 0}})
        step.do("after", lambda: _bump(f"{iid}:after"))
        return written


class CrashableGather(WorkflowEntrypoint):
    """CrashableAll as an async run(): the three steps gathered (asyncio.gather)."""

    async def run(self, event, step):
        marker, iid = event.payload["marker"], event.instance_id
        await step.do("before", lambda: _bump(f"{iid}:before"))

        def victim():
            return _hang_once(marker, f"{iid}:victim")

        results = await asyncio.gather(step.do("left", lambda: _bump(f"{iid}:left")),
                                       step.do("victim", victim, config={"retries": {"limit": 0}}),
                                       step.do("right", lambda: _bump(f"{iid}:right")))
        await step.do("after", lambda: _bump(f"{iid}:after"))
        return results


class CrashableKid(WorkflowEntrypoint):
    """A child workflow whose one step, the first time, records its process id and hangs until that process
    is killed."""

    def run(self, event, step):
        marker, iid = event.payload["marker"], event.instance_id
        return step.do("victim", lambda: _hang_once(marker, f"{iid}:victim"), config={"retries": {"limit": 0}})


class KidParent(WorkflowEntrypoint):
    """Starts a crashable-kid as its child and returns what it returned."""

    def run(self, event, step):
        return {"got": step.child("kid", "crashable-kid", {"marker": event.payload["marker"]})}


class HoldsTheLock(WorkflowEntrypoint):
    """Its step writes inside a transaction and, the first time, records its process id and hangs
    before the commit: on SQLite, its process holds the database's write lock meanwhile."""

    def run(self, event, step):
        from django.db import transaction

        def hold():
            import os
            import time

            marker = event.payload["marker"]
            with transaction.atomic():
                count = _bump(f"{event.instance_id}:hold")
                if not os.path.exists(marker):  # the transaction's writes go with its process: not a count
                    with open(marker, "w") as f:
                        f.write(str(os.getpid()))
                    for _ in range(600):
                        time.sleep(0.1)
                return count

        step.do("hold", hold, config={"retries": {"limit": 0}})
        return "done"


class Quick(WorkflowEntrypoint):
    def run(self, event, step):
        for name in ("one", "two", "three"):
            step.do(name, lambda name=name: _bump(f"{event.instance_id}:{name}"))
        return "done"


class Poison(WorkflowEntrypoint):
    def run(self, event, step):
        import os
        import signal

        def kill_my_worker():
            _bump(f"{event.instance_id}:poison")
            if "TEST_WORKFLOWS_SETTINGS" not in os.environ:
                # Not a worker process of tests/workers.py: an instance replayed in the test process
                # itself (the recording executor of workflows_env, or the inline executor) must not take the
                # test run down with it.
                raise RuntimeError("the poison workflow kills only worker processes")
            os.kill(os.getpid(), signal.SIGKILL)

        step.do("kill-my-worker", kill_my_worker)
        return "unreachable"


class LongStep(WorkflowEntrypoint):
    """One step that runs longer than the lease: the lease must be renewed, not taken over."""

    def run(self, event, step):
        import time

        def long():
            _bump(f"{event.instance_id}:long")
            time.sleep(event.payload.get("seconds", 5))
            return "done"

        return step.do("long", long)


class LongTransaction(WorkflowEntrypoint):
    """One step that writes inside a transaction held longer than the lease: ``atomic=True`` (the engine's
    transaction) or, with ``"own": true``, a plain step whose body opens its own. On SQLite its process
    holds the database's write lock for the whole body."""

    def run(self, event, step):
        import time

        from django.db import transaction

        def write_and_wait():
            count = _bump(f"{event.instance_id}:write")
            time.sleep(event.payload.get("seconds", 5))
            return count

        if event.payload.get("own"):
            def own():
                with transaction.atomic():
                    return write_and_wait()

            return step.do("write", own)
        return step.do("write", write_and_wait, atomic=True)


class EdgeOfTimeout(WorkflowEntrypoint):
    """Step attempts that end within a millisecond either side of their timeout, their last millisecond
    spent in one C call (a scan of a list) with no check for an interruption in it: a watchdog waking
    during that call lands its interruption where the attempt's watch is being ended. It must neither
    linger nor land anywhere else."""

    def run(self, event, step):
        import random
        import time

        from django_workflows import StepTimeoutError

        timeout_ms = event.payload.get("timeout_ms", 5)
        rng = random.Random(event.payload.get("seed", 0))
        haystack = list(range(100_000))
        started = time.perf_counter()
        -1 in haystack  # noqa: B015 - timed, to size a scan of about a millisecond
        per_item = max(time.perf_counter() - started, 1e-6) / len(haystack)
        haystack = list(range(int(0.001 / per_item)))
        timed_out = 0
        for n in range(event.payload.get("attempts", 200)):
            ends_after = (timeout_ms - 0.7 + rng.uniform(-1.0, 1.0)) / 1000

            def busy(ends_after=ends_after, n=n):
                ends_at = time.monotonic() + ends_after
                while time.monotonic() < ends_at - 0.001:
                    pass
                -1 in haystack  # noqa: B015
                return n

            try:
                step.do("edge", busy, config={"timeout": timeout_ms, "retries": {"limit": 0}})
            except StepTimeoutError:
                timed_out += 1
        # A watch left armed by an edge attempt interrupts this thread again a second later, wherever it
        # is: here, a step far inside its own timeout, which it would fail as timed out.
        try:
            step.do("quiet", lambda: time.sleep(1.5) or "quiet",
                    config={"timeout": "1 minute", "retries": {"limit": 0}})
            stray = False
        except StepTimeoutError:
            stray = True
        return {"timed_out": timed_out, "stray_interruption": stray}


class SimulatedCrash(BaseException):
    """Stands for the worker process dying: not an Exception, so nothing in the engine catches it."""


# Where ``Program`` crashes: {(instance_id, op index, "before" | "after")}, each crashing once.
crash_points: set = set()


class Program(WorkflowEntrypoint):
    """Runs a random program of steps given in params: the subject of the replay property tests.

    ops: ["do", fail_times, retry_limit, caught] | ["sleep", ms] | ["wait", deliver]; each do step has an
    undo, which runs (last first) when the program errors.
    """

    def run(self, event, step):
        iid, trace = event.instance_id, []
        for index, op in enumerate(event.payload["ops"]):
            kind = op[0]
            if kind == "do":
                _, fail_times, limit, caught = op

                def body(index=index, fail_times=fail_times):
                    if (iid, index, "before") in crash_points:
                        crash_points.discard((iid, index, "before"))
                        raise SimulatedCrash()
                    calls.update([(iid, index)])
                    if (iid, index, "after") in crash_points:
                        crash_points.discard((iid, index, "after"))
                        raise SimulatedCrash()
                    if calls[(iid, index, "failed")] < fail_times:
                        calls.update([(iid, index, "failed")])
                        raise ValueError(f"op {index} failed")
                    return index * 10

                def undo(index=index):
                    # Undone when run() fails: crash points and counts of their own ("undo<index>").
                    if (iid, f"undo{index}", "before") in crash_points:
                        crash_points.discard((iid, f"undo{index}", "before"))
                        raise SimulatedCrash()
                    calls.update([(iid, f"undo{index}")])
                    if (iid, f"undo{index}", "after") in crash_points:
                        crash_points.discard((iid, f"undo{index}", "after"))
                        raise SimulatedCrash()

                try:
                    trace.append(step.do(f"op{index}", body,
                                         config={"retries": {"limit": limit, "delay": "1 second"},
                                                 "rollback": undo}))
                except ValueError as exc:
                    if not caught:
                        raise
                    trace.append(f"caught: {exc}")
            elif kind == "sleep":
                step.sleep(f"sleep{index}", op[1])
                trace.append("slept")
            else:
                try:
                    got = step.wait_for_event(f"wait{index}", "go" if op[1] else "never", timeout="1 hour")
                    trace.append(["event", got.payload])
                except WorkflowTimeoutError:
                    trace.append("timeout")
        return trace


# The chaos test's workflow lives with its log helpers; importing it here registers it.
from tests.testapp.chaos import ChaosMix  # noqa: E402, F401

# So are the workflows whose half-run journals are committed under tests/golden/.
from tests.testapp import golden  # noqa: E402, F401

# And the typed values' workflow of the system tier.
from tests.testapp import typed_workflows  # noqa: E402, F401


class Skewed(WorkflowEntrypoint):
    """Steps that take a while, then a sleep: each step body is logged with the monotonic clock, which
    all processes of a host share and ``faketime`` leaves alone (see tests/system/test_clock_skew.py)."""

    def run(self, event, step):
        import json
        import os
        import time

        def body(key):
            def logged():
                path = os.path.join(os.environ["TEST_SKEW_LOG_DIR"], f"{os.getpid()}.jsonl")
                with open(path, "a") as log:
                    log.write(json.dumps(["run", event.instance_id, key, time.monotonic()]) + "\n")
                    log.flush()
                    deadline = time.monotonic() + event.payload["busy"]
                    while time.monotonic() < deadline:  # not time.sleep: faketime breaks it
                        pass
                    log.write(json.dumps(["ran", event.instance_id, key, time.monotonic()]) + "\n")
                return key
            return logged

        for n in range(event.payload["steps"]):
            step.do(f"work {n}", body(f"work {n}"))
        step.sleep("nap", f"{event.payload['nap']} seconds")
        return step.do("after nap", body("after nap"))


# Only in the worker processes of tests/system/test_schedules.py: a schedule declared here for every
# process would have every test's workers create its instances.
if __import__("os").environ.get("TEST_SCHEDULE_EVERY_SECOND"):

    class EverySecond(WorkflowEntrypoint):
        """Created by the workers' cron schedule, one instance a second."""

        schedules = ["* * * * * *"]

        def run(self, event, step):
            return step.do("record", lambda: event.payload["scheduledTime"])


class Slotted(WorkflowEntrypoint):
    """At most two running at once; sleeps when params say so (tests/integration/test_limits.py)."""

    concurrency = 2

    def run(self, event, step):
        params = event.payload or {}
        first = step.do("first", lambda: params.get("n", 0))
        if params.get("sleep"):
            step.sleep("nap", params["sleep"])
        if params.get("wait"):
            step.wait_for_event("go", type="go", timeout="1 hour")
        return step.do("second", lambda: first + 1)


class RateLimited(WorkflowEntrypoint):
    """At most three starts in any minute."""

    rate_limit = "3/minute"

    def run(self, event, step):
        step.sleep("nap", "10 minutes")
        return step.do("done", lambda: "done")


class SlowSlotted(WorkflowEntrypoint):
    """At most five running at once, across every worker (tests/system/test_limits.py)."""

    concurrency = 5

    def run(self, event, step):
        import time

        # Long enough that, handed on from replay to replay, the five slots are all taken at some moment
        # even on a loaded machine: the test checks the limit was reached, not only never passed. At 0.3 s
        # a replay, CI's three system passes at once on two cores left at most four running together.
        step.do("work", lambda: time.sleep(0.4) or 1)
        return step.do("more", lambda: time.sleep(0.4) or 2)


# Whether Reporting reports its progress: a test turns it on between two replays, as a deploy would.
REPORTING = {"on": True}


class Reporting(WorkflowEntrypoint):
    """Reports its progress around ``parts`` steps (``step.progress``); with ``wait``, waits for a ``go``
    event after the first part; with ``refused`` ("object" or "large"), first reports a value that
    step.progress refuses."""

    def run(self, event, step):
        params = event.payload or {}
        parts = params.get("parts", 2)
        if params.get("refused"):
            step.progress(object() if params["refused"] == "object" else "x" * 5000)
        if REPORTING["on"]:
            step.progress({"done": 0, "total": parts})
        for number in range(1, parts + 1):
            step.do("part", lambda number=number: calls.update(["part"]) or number)
            if REPORTING["on"]:
                step.progress({"done": number, "total": parts})
            if params.get("wait") and number == 1:
                step.wait_for_event("go", "go", timeout="1 hour")
        return {"parts": parts}


class StartStamp(WorkflowEntrypoint):
    """Says when its first step ran, and with which params: when a scheduled instance really started."""

    def run(self, event, step):
        import time

        return step.do("started", lambda: {"at": time.time(), "params": event.payload})


# Keyed limits, priorities and queues, in a module of their own.
from tests.testapp import flow_control  # noqa: E402, F401
