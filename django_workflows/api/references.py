"""Large values in the API: a reference shown as the journal keeps it (its size and SHA-256), with the
address that answers with the value (``api.stored_values``)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from django_workflows.shared import large_values


def with_addresses(described: dict[str, Any], request) -> dict[str, Any]:
    """``described`` (an instance's description) with each reference it shows given the ``url`` that
    answers with the value: its output, its steps' results, the payloads of its events and waits."""
    name, instance_id = described["workflow"], described["id"]

    def address(value: Any) -> None:
        reference = large_values.reference_of(value)
        if reference is not None:
            value[large_values.MARKER]["url"] = request.build_absolute_uri(reverse(
                "django_workflows_api:instance-value", args=[name, instance_id, reference.sha256]))

    address(described.get("output"))
    for step in described.get("steps", []):
        output = step.get("output")
        address(output)
        if isinstance(output, dict):
            address(output.get("payload"))
    for event in described.get("events", []):
        address(event.get("payload"))
    return described
