"""The API's pages: the instance list's page and page size, checked as whole numbers."""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from django_workflows.api import exceptions
from django_workflows.api import serializers as s
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.counts import CountingPaginator


class InstancePagination(PageNumberPagination):
    page_size_query_param = "per_page"
    django_paginator_class = CountingPaginator
    max_page_size = 1000

    def get_page_size(self, request):
        self.page_size = workflow_settings.API_PAGE_SIZE
        raw = request.query_params.get(self.page_size_query_param)
        if raw is not None and not whole_number(raw, 1, self.max_page_size):
            raise exceptions.WorkflowAPIError(
                f"per_page must be a whole number from 1 to {self.max_page_size}, got {raw[:100]!r}.",
                "invalid_page")
        return super().get_page_size(request)

    def get_page_number(self, request, paginator):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and not whole_number(raw, 1, 10**12):
            raise exceptions.WorkflowAPIError(f"page must be a whole number from 1, got {raw[:100]!r}.",
                                              "invalid_page")
        return super().get_page_number(request, paginator)

    def get_paginated_response(self, data):
        return Response(s.InstancePageSerializer({
            "count": self.page.paginator.count,
            "count_estimated": self.page.paginator.counted.estimated,
            "next": self.get_next_link(),
            "previous": self.get_previous_link(),
            "results": data,
        }).data)


def whole_number(text: str, low: int, high: int) -> bool:
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
    return 0 < len(text) <= 13 and all("0" <= c <= "9" for c in text) and low <= int(text) <= high
