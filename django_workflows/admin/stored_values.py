"""A large value kept in file storage (``large_values``: a ``$stored`` reference in the journal, an output
or the inbox), downloaded from the instance's page: the link beside the reference, and this view, which
answers with the value's JSON once checked against its hash. Only for staff who may view the instance
(its workflow's permission and the project's rule, ``access``), as the page it is linked from."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse

from django_workflows.shared import large_values
from django_workflows.admin.page_base import PageMixin
from django_workflows.errors import StoredValueError


class StoredValueDownload(PageMixin):
    def stored_value_view(self, request: HttpRequest, object_id: str, sha256: str) -> HttpResponse:
        instance = self._instance_or_404(request, object_id)
        # Found in the instance's own folder by its hash: the address cannot name another instance's file.
        reference = large_values.of_instance(instance.pk, sha256)
        if reference is None:
            raise Http404(f"Instance {instance} has no stored value {sha256[:100]!r}.")
        try:
            text = large_values.read_text(reference, lambda: f"instance {instance}", check_size=False)
        except StoredValueError as exc:
            # Gone or changed since it was written: said as the API says it, not a server error.
            return HttpResponse(str(exc), status=410, content_type="text/plain; charset=utf-8")
        response = HttpResponse(text, content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{instance.instance_id}-{sha256[:12]}.json"'
        return response
