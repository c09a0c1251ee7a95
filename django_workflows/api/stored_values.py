"""The view that answers a large value's address (``api.references``) with the value's JSON, checked
against its hash."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiResponse

from django_workflows.shared import large_values
from django_workflows.api.schema import operation
from django_workflows.api.views import WorkflowAPIView, errors
from django_workflows.errors import InstanceNotFound
from django_workflows.models import Instance


class InstanceValueView(WorkflowAPIView):
    """``GET <name>/instances/<id>/values/<sha256>/``: a large value of the instance, as JSON."""

    @operation(operation_id="instances_value_retrieve",
               responses={200: OpenApiResponse(description="The stored value, as the JSON it was written as."),
                          **errors(400, 401, 403, 404)})
    def get(self, request, name, instance_id, sha256):
        row: Instance = self.instance(name, instance_id)
        # Found by the instance's own folder and the hash: nobody reads a file of another instance.
        reference = large_values.of_instance(row.pk, sha256)
        if reference is None:
            raise InstanceNotFound(f"Instance {name}/{instance_id} has no stored value {sha256[:100]!r}.",
                                   workflow=name, instance_id=instance_id)
        text = large_values.read_text(reference, lambda: f"instance {name}/{instance_id}", check_size=False)
        return HttpResponse(text, content_type="application/json")
