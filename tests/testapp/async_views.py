"""Async views that start and steer instances through the handles' async twins, as a project's would:
tests/integration/test_results.py calls them with Django's async test client."""

import json

from django.http import JsonResponse

from django_workflows import InstanceFailed, ResultTimeout, workflows


async def start_and_wait(request, name):
    """Create an instance with the posted params, and answer with its output once it has ended."""
    handle = await workflows.get(name).acreate(params=json.loads(request.body or b"null"))
    try:
        output = await handle.aresult(timeout=float(request.GET.get("timeout", "10")))
    except InstanceFailed as failed:
        return JsonResponse({"id": handle.id, "error": failed.error}, status=409)
    except ResultTimeout as late:
        return JsonResponse({"id": handle.id, "status": late.status}, status=504)
    return JsonResponse({"id": handle.id, "output": output, "status": (await handle.astatus())["status"]})


async def send_and_wait(request, name, instance_id):
    """Send the posted event to an instance, and answer with its output once it has ended."""
    handle = await workflows.get(name).aget(instance_id)
    event = json.loads(request.body)
    sent = await handle.asend_event(type=event["type"], payload=event.get("payload"))
    output = await handle.aresult(timeout=10)
    return JsonResponse({"event_id": sent.event_id, "output": output})
