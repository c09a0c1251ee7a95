"""The examples of Cloudflare's Workflows announcement, ported: a document pipeline, a payment
approval, an order saga (with rollbacks), a race of two webhooks, a flaky step and a plain sleep; the
DAG example of Cloudflare's Python SDK, as written there (async, decorators, dependencies by name); and
the smallest workflow of all, order-fulfilment, to read first.

Every service call passes an idempotency key made of the instance id and the step, so a step
that runs again after a crash is recognised by the service.
"""

from django_workflows import WorkflowEntrypoint, WorkflowTimeoutError
from examples import services


class DocumentPipeline(WorkflowEntrypoint):
    """Parse a document, summarize it (a flaky service: retried with exponential backoff), notify."""

    name = "document-pipeline"

    def run(self, event, step):
        key = event.instance_id
        document = step.do("parse", lambda: services.parse_document(f"{key}:parse", event.payload["url"]))
        summary = step.do(
            "summarize",
            lambda: services.summarize(f"{key}:summarize", document["text"]),
            config={"retries": {"limit": 4, "delay": "2 seconds", "backoff": "exponential"}, "timeout": "1 minute"},
        )
        step.do("notify", lambda: services.notify(f"{key}:notify", event.payload.get("email", "team@example.com"),
                                                  summary))
        return {"summary": summary, "words": document["words"]}


class PaymentApproval(WorkflowEntrypoint):
    """Validate, ask a manager, wait up to 72 hours for their decision, then charge."""

    name = "payment-approval"
    approvals = {"manager-approval"}  # a manager approves or rejects it in the admin

    def run(self, event, step):
        key = event.instance_id

        @step.do("validate-payment", config={"retries": {"limit": 0}})
        def validate():
            return services.validate_payment(f"{key}:validate", event.payload)

        try:
            payment = validate()
        except ValueError as exc:
            return {"status": "invalid", "reason": str(exc)}

        step.do("send-approval-request", lambda: services.ask_manager(f"{key}:ask", payment))
        try:
            approval = step.wait_for_event("manager-approval", "manager-approval", timeout="72 hours")
        except WorkflowTimeoutError:
            step.do("notify-timeout", lambda: services.notify(f"{key}:timeout", "requester", "approval expired"))
            return {"status": "expired"}
        if approval.payload.get("outcome") != "approved":
            step.do("notify-rejection", lambda: services.notify(f"{key}:rejected", "requester", "rejected"))
            return {"status": "rejected", "comment": approval.payload.get("comment")}

        @step.do("process-payment", config={"retries": {"limit": 3, "delay": "2 seconds", "backoff": "exponential"},
                                            "timeout": "2 minutes"})
        def process():
            return services.charge(f"{key}:charge", payment["amount"])

        return {"status": "charged", "charge": process()}


class OrderSaga(WorkflowEntrypoint):
    """Reserve inventory, charge, confirm; when a step fails for good, undo what was done, newest first."""

    name = "order-saga"

    def run(self, event, step):
        key, order = event.instance_id, event.payload
        quick = {"retries": {"limit": 2, "delay": "1 second", "backoff": "constant"}}
        # Each undo sits beside the step it undoes; a failure below runs them, newest first, each a
        # durable step of its own ("rollback reserve-inventory"), with the same quick retries.
        try:
            reservation = step.do("reserve-inventory",
                                  lambda: services.reserve_inventory(f"{key}:reserve", order["items"]), config={
                                      **quick, "rollback": lambda output: services.release_inventory(
                                          f"{key}:release", output["reservation_id"]), "rollback_config": quick})
            charge = step.do("charge", lambda: services.charge(f"{key}:charge", order["amount"]), config={
                **quick, "rollback": lambda output: services.refund(f"{key}:refund", output["charge_id"]),
                "rollback_config": quick})
            step.do("confirm", lambda: services.confirm_order(f"{key}:confirm", order["order_id"]), config=quick)
        except services.ServiceError as exc:
            undone = step.rollback_all(exc)
            return {"status": "compensated", "error": str(exc), "undone": undone}
        return {"status": "confirmed", "reservation": reservation["reservation_id"], "charge": charge["charge_id"]}


class PaymentRace(WorkflowEntrypoint):
    """Two webhooks race: payment-success against payment-failure; neither within 4 hours is a timeout."""

    name = "payment-race"

    def run(self, event, step):
        try:
            first = step.wait_for_event("payment-outcome", ["payment-success", "payment-failure"], timeout="4 hours")
        except WorkflowTimeoutError:
            return {"status": "timed-out"}
        if first.type == "payment-failure":
            return {"status": "failed", "reason": (first.payload or {}).get("reason")}
        return {"status": "paid", "payment": first.payload}


class FlakyStep(WorkflowEntrypoint):
    """A step that fails twice, then succeeds: retries are visible on the timeline."""

    name = "flaky-step"

    def run(self, event, step):
        def flaky():
            from examples.models import ServiceCall

            calls = ServiceCall.objects.filter(service="flaky", key=event.instance_id).count()
            ServiceCall.objects.create(service="flaky", key=event.instance_id, succeeded=calls >= 2)
            if calls < 2:
                raise services.ServiceError(f"failure {calls + 1} of 2")
            return "third time lucky"

        return step.do("flaky", flaky, config={"retries": {"limit": 3, "delay": "1 second", "backoff": "linear"}})


class PlainSleep(WorkflowEntrypoint):
    """Sleep, then say so."""

    name = "plain-sleep"

    def run(self, event, step):
        step.sleep("nap", event.payload.get("duration", "10 seconds") if event.payload else "10 seconds")
        return step.do("wake-up", lambda: "awake")


class OrderFulfilment(WorkflowEntrypoint):
    """The smallest example, to read first: reserve, sleep 2 seconds (durably), ship.

    Not one of Cloudflare's examples, nor a saga (order-saga is the order that undoes its steps):
    two steps around a sleep, calling no outside service, so nothing in it fails. The sleep is a
    row in the database, not a sleeping process: a worker stopped during it, and started again,
    carries on with "ship", without doing "reserve-inventory" again.
    """

    name = "order-fulfilment"

    def run(self, event, step):
        order = event.payload

        @step.do("reserve-inventory")
        def reserve():
            return {"order": order["order_id"], "reserved": order["items"]}

        reservation = reserve()
        step.sleep("wait-for-warehouse", "2 seconds")
        shipment = step.do("ship", lambda: {"tracking": f"TRK-{order['order_id']}"})
        return {"reservation": reservation, "shipment": shipment}



class PythonDag(WorkflowEntrypoint):
    """Cloudflare's Python SDK DAG example, as written there: async steps, the last depending on two."""

    name = "python-dag"

    async def run(self, event, step):
        await step.sleep("demo sleep", "2 seconds")

        @step.do()
        async def dep_1():
            return "dep1"

        @step.do()
        async def dep_2():
            return "dep2"

        @step.do(concurrent=True)
        async def final_step(dep_1, dep_2, ctx):
            # Dependencies come in by parameter name; ctx is the step context.
            return f"{dep_1} {dep_2} (attempt {ctx.attempt} of {ctx.step.name})"

        return await final_step()


# Registered by importing it: a workflow of Cloudflare's documentation, its import line the only change.
from examples import ported_from_cloudflare  # noqa: E402, F401
