from django_workflows import WorkflowEntrypoint


class OrderFulfilment(WorkflowEntrypoint):
    """Reserve, wait a little, then ship: the smallest workflow with a durable sleep."""

    def run(self, event, step):
        order = event.payload

        @step.do("reserve-inventory")
        def reserve():
            return {"order": order["order_id"], "reserved": order["items"]}

        reservation = reserve()
        step.sleep("wait-for-warehouse", "2 seconds")
        shipment = step.do("ship", lambda: {"tracking": f"TRK-{order['order_id']}"})
        return {"reservation": reservation, "shipment": shipment}
