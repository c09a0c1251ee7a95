"""The workflows of the golden journals: rows of their instances, written mid-flight by a release, are
committed under tests/golden/<release>/ and every later release drives them to their end
(tests/integration/test_golden_journals.py; tests/golden/record.py records them).

Instances of these classes are stored, half-run, in those rows. Change a class here only as a deploy
would change a workflow under running instances: new steps after the journaled ones, or behind
``step.patched``. Anything else fails the golden test, as it would fail those instances in production.

Every step body counts its runs in ``calls`` by (instance id, step key), so the test can tell a step the
journal answered from one that ran again. Whether a body fails depends only on what is durable (its
attempt number, the clock, the params), never on this process's memory: the rows are written by one
process and replayed by another.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from django_workflows import NonRetryableError, WorkflowEntrypoint, WorkflowTimeoutError
from django_workflows.shared import clock
from tests.testapp.workflows import calls


class GoldenError(Exception):
    """An error of the workflows' own: journaled with its class, raised again with it on every replay."""


def count(event, ctx) -> None:
    """Count one run of the step body ``ctx`` is the context of, by instance and step key."""
    calls.update([(event.instance_id, f"{ctx.step.name}-{ctx.step.count}")])


def counted(event, value, *, failing_attempts: int = 0, error: type[Exception] = GoldenError):
    """A step body that counts its run and returns ``value``; its first ``failing_attempts`` attempts
    raise ``error`` instead."""
    def body(ctx):
        count(event, ctx)
        if ctx.attempt <= failing_attempts:
            raise error(f"attempt {ctx.attempt} of {ctx.step.name} failed")
        return value
    return body


# Results of several JSON shapes: each is journaled as JSON text, and an old journal's text must decode
# to the same value under every later release.
SHAPES = (
    ("integer", 42),
    ("big integer", 2**53 + 1),
    ("float", -0.125),
    ("tiny float", 1e-7),
    ("text", "naïve café ✓ 東京 😀"),
    ("escapes", 'quote " backslash \\ newline \n tab \t'),
    ("empty text", ""),
    ("true", True),
    ("nothing", None),
    ("list", [1, "two", [3.5, None], {"four": 4}]),
    ("tuple", (1, 2)),
    ("object", {"nested": {"deep": [True, False]}, "clé": "valeur", "n": 0}),
    ("empty object", {}),
    ("empty list", []),
)


class GoldenShapes(WorkflowEntrypoint):
    """Steps returning values of every JSON shape, then a sleep and a sleep until a moment."""

    def run(self, event, step):
        shapes = {}
        for name, value in SHAPES:
            shapes[name] = step.do(name, counted(event, value))
        step.sleep("settle", "1 hour")
        step.sleep_until("alarm", event.payload["alarm_at"])
        kinds = sorted(type(value).__name__ for value in shapes.values())
        summary = step.do("summary", counted(event, kinds))
        return {"shapes": shapes, "summary": summary}


class GoldenRetries(WorkflowEntrypoint):
    """A step retried after failed attempts; when it fails for good, run() catches it and falls back. A
    step refused with NonRetryableError is caught too."""

    def run(self, event, step):
        params = event.payload
        try:
            result = step.do(
                "call provider", counted(event, {"answer": 42}, failing_attempts=params["failures"]),
                config={"retries": {"limit": params["retries"], "delay": "1 minute",
                                    "backoff": "exponential"}},
            )
        except GoldenError as exc:
            result = step.do("fall back", counted(event, {"fallback": str(exc)}))
        try:
            step.do("refuse", counted(event, None, failing_attempts=1, error=NonRetryableError))
        except NonRetryableError as exc:
            refused = str(exc)
        return {"result": result, "refused": refused}


class GoldenApproval(WorkflowEntrypoint):
    """Waits up to 72 hours for a decision of either type; once approved, cools off for an hour, then
    waits for the receipt (which may have arrived, and be buffered in the inbox, meanwhile)."""

    def run(self, event, step):
        step.do("ask", counted(event, {"asked": event.payload["approver"]}))
        try:
            decision = step.wait_for_event("decision", ["approve", "reject"], timeout="72 hours")
        except WorkflowTimeoutError:
            step.do("expire", counted(event, "expired"))
            return {"status": "expired"}
        if decision.type == "reject":
            return {"status": "rejected", "reason": decision.payload}
        step.sleep("cool-off", "1 hour")
        receipt = step.wait_for_event("receipt", "receipt", timeout="1 day")
        step.do("file", counted(event, {"filed": receipt.payload}))
        return {"status": "approved", "decision": decision.payload,
                "decided_at": decision.timestamp.isoformat(), "receipt": receipt.payload,
                "received_at": receipt.timestamp.isoformat()}


class GoldenKid(WorkflowEntrypoint):
    """A child: doubles a number, after waiting for "go" if asked; fails afterwards if asked."""

    def run(self, event, step):
        params = event.payload
        if params.get("wait"):
            step.wait_for_event("go", "go", timeout="1 day")
        double = step.do("double", counted(event, params["n"] * 2))
        if params.get("fail"):
            raise GoldenError(f"the kid gave up at {double}")
        return {"double": double}


class GoldenParent(WorkflowEntrypoint):
    """Starts a golden-kid and waits for its end (its error caught), then rests and thanks."""

    def run(self, event, step):
        try:
            got = step.child("kid", "golden-kid", event.payload["kid"])
        except GoldenError as exc:
            got = {"caught": str(exc)}
        step.sleep("rest", "1 hour")
        thanks = step.do("thank", counted(event, "thanked"))
        return {"got": got, "thanks": thanks}


class GoldenSaga(WorkflowEntrypoint):
    """Reserves and charges, each with its undo (the Python form and the config form); the warehouse
    refuses the order, and the undos run: asked by run(), or by the engine when run() lets the error out.
    The refund fails while the payment provider is down (params: until when), and is retried."""

    def run(self, event, step):
        params, iid = event.payload, event.instance_id

        @step.with_rollback("reserve")
        def reserve(ctx):
            count(event, ctx)
            return {"reservation": f"res-{iid}"}

        @reserve.undo
        def release(output, ctx):
            calls.update([(iid, f"rollback {ctx.step.name}-{ctx.step.count}")])
            return {"released": output["reservation"]}

        def refund(output, ctx):
            calls.update([(iid, f"rollback {ctx.step.name}-{ctx.step.count}")])
            if clock.now() < datetime.fromisoformat(params["provider_down_until"]):
                raise GoldenError("the payment provider is down")
            return {"refunded": output["charge"]}

        reservation = reserve()
        charge = step.do("charge", counted(event, {"charge": f"ch-{iid}", "amount": 120}), config={
            "rollback": refund,
            "rollback_config": {"retries": {"limit": 3, "delay": "1 minute", "backoff": "constant"}},
        })
        try:
            step.do("confirm", counted(event, None, failing_attempts=1, error=NonRetryableError))
        except NonRetryableError as exc:
            if not params["compensate"]:
                raise
            undone = step.rollback_all(exc)
            return {"status": "compensated", "undone": undone}
        return {"status": "confirmed", "reservation": reservation, "charge": charge}


class GoldenParcel(WorkflowEntrypoint):
    """Packs, insures (a change deployed behind step.patched: instances that had passed this point on
    the code before keep to it), waits for the parcel to ship, delivers."""

    def run(self, event, step):
        step.do("pack", counted(event, {"parcel": event.instance_id}))
        insured = step.patched("insurance")
        if insured:
            step.do("insure", counted(event, {"insured": True}))
        shipped = step.wait_for_event("shipped", "shipped", timeout="7 days")
        step.do("deliver", counted(event, {"tracking": shipped.payload["tracking"]}))
        return {"insured": insured, "tracking": shipped.payload["tracking"]}


class GoldenFanOut(WorkflowEntrypoint):
    """Three quotes asked side by side (step.all), one retried; the best is booked in an atomic step."""

    def run(self, event, step):
        quotes = step.all([
            ("quote a", counted(event, {"carrier": "a", "price": 12.5})),
            ("quote b", counted(event, {"carrier": "b", "price": 9.75}, failing_attempts=1),
             {"retries": {"limit": 2, "delay": "1 minute", "backoff": "constant"}}),
            ("quote c", counted(event, {"carrier": "c", "price": 11})),
        ])
        best = min(quotes, key=lambda quote: quote["price"])
        booked = step.do("book", counted(event, {"booked": best["carrier"]}), atomic=True)
        return {"quotes": quotes, "booked": booked}


class GoldenAsync(WorkflowEntrypoint):
    """An async run(): two steps gathered, a sleep, then steps declared as functions, the last taking the
    other two's results side by side, and an atomic step."""

    async def run(self, event, step):
        left, right = await asyncio.gather(step.do("left", counted(event, "L")),
                                           step.do("right", counted(event, ["R"])))
        await step.sleep("nap", "1 hour")

        @step.do()
        async def first(ctx):
            count(event, ctx)
            return 1

        @step.do()
        def second(ctx):
            count(event, ctx)
            return 2

        @step.do(concurrent=True)
        async def total(first, second, ctx):
            count(event, ctx)
            return first + second

        summed = await total()
        stamped = await step.do("stamp", counted(event, {"stamped": True}), atomic=True)
        return {"left": left, "right": right, "total": summed, "stamped": stamped}
