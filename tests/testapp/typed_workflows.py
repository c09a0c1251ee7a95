"""A workflow whose params and step results are typed values, for the system tier: run() writes the types it
sees to a file on every replay, so a test can compare what a worker saw before it was killed with what
another worker's replay saw after."""

from __future__ import annotations

import dataclasses
import json
import os
from decimal import Decimal

from django_workflows import WorkflowEntrypoint
from tests.testapp.models import SideEffect


@dataclasses.dataclass
class Shipment:
    weight: Decimal
    parcels: tuple[int, ...]


def _kinds(values: dict) -> dict:
    return {name: f"{type(value).__module__}.{type(value).__qualname__}" for name, value in values.items()}


def _seen(path: str, values: dict) -> None:
    # Outside a step on purpose: once per replay, in the process that runs it.
    with open(path, "a") as file:
        file.write(json.dumps({"pid": os.getpid(), "types": _kinds(values),
                               "values": {name: repr(value) for name, value in values.items()}}) + "\n")


def _hang_once(marker: str, name: str) -> str:
    """The first run records its process id in ``marker`` and hangs until that process is killed."""
    import time

    if SideEffect.bump(name) == 1:
        with open(marker, "w") as file:
            file.write(str(os.getpid()))
        for _ in range(600):
            time.sleep(0.1)
    return "survived"


class TypedCrashable(WorkflowEntrypoint):
    """Typed params and results through a step that hangs the first time, until its process is killed."""

    def run(self, event, step):
        params = event.payload
        shipment = step.do("shipment", lambda: Shipment(params["total"] / 4, (1, 2)))
        price = step.do("price", lambda: str(params["total"]), result_type=Decimal)
        values = {"total": params["total"], "at": params["at"], "id": params["id"], "row": params["row"],
                  "quote": params["quote"], "shipment": shipment, "weight": shipment.weight, "price": price}
        _seen(params["seen"], values)
        step.do("victim", lambda: _hang_once(params["marker"], f"{event.instance_id}:victim"),
                config={"retries": {"limit": 0}})
        return {"total": params["total"] + price, "at": params["at"], "row": params["row"].pk}
