"""The instance list: its columns, the workflow filter, and the bar of counts by status above it. Its
bulk actions are steering's."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from django.contrib import admin
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime

from django_workflows.shared import counts, workflow_access as access
from django_workflows.admin.page_base import PageMixin, refuse_nul
from django_workflows.admin.search_filters import SubjectFilter, TagFilter
from django_workflows.client.approvals import awaiting_approval
from django_workflows.shared.definition import registry
from django_workflows.reading.describe import status_totals
from django_workflows.reading.drawing.time_axis import human_milliseconds
from django_workflows.store import listing
from django_workflows.templatetags.workflows_admin import status_badge_html


def _moment(value):
    """A timestamp as the list shows it: compact, sortable, in the current time zone."""
    if value is None:
        return "—"
    local = localtime(value)
    return format_html(
        '<time datetime="{}" class="dw-moment">{}<span>{}</span></time>',
        value.isoformat(),
        date_format(local, "Y-m-d"),
        date_format(local, "H:i:s"),
    )


class WorkflowFilter(admin.SimpleListFilter):
    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request, model_admin):
        # Workflows defined now, and any whose instances remain after its class was removed.
        stored = listing.workflow_names()
        names = sorted(set(registry.names()) | set(stored))
        return [(name, name) for name in names if access.knows_workflow(request.user, name)]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.for_workflow(self.value())
        return queryset


class VersionFilter(admin.SimpleListFilter):
    """The code versions instances were created under (``Instance.version``): those of the workflow
    chosen in the workflow filter, or of every workflow, newest-looking first."""

    title = "version"
    parameter_name = "version"
    NONE = "(none)"
    """The choice for instances created with no version; a version of that very text is listed as
    itself, and this choice then finds both."""
    SHOWN = 50

    def lookups(self, request, model_admin):
        workflow = request.GET.get(WorkflowFilter.parameter_name) or None
        versions = sorted(set(listing.versions(workflow)), key=_natural, reverse=True)
        return [(version or self.NONE, version or self.NONE) for version in versions[: self.SHOWN]]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value == self.NONE:
            return queryset.filter(version__in=("", self.NONE))
        return queryset.filter(version=value)


def _natural(version: str) -> tuple:
    """"10" after "9", "v1.10" after "v1.9": the runs of digits compared as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", version))


class InstanceList(PageMixin):
    """The ModelAdmin's changelist, with the columns and the status bar of a workflows admin."""

    list_display = (
        "instance_id",
        "workflow",
        "status_badge",
        "current_step",
        "wake_time",
        "cpu_time",
        "created",
        "updated",
    )
    list_display_links = ("instance_id",)
    list_filter = (WorkflowFilter, VersionFilter, "status", "created_at", TagFilter, SubjectFilter)
    search_fields = ("instance_id",)
    search_help_text = "An instance id, or its beginning."
    list_per_page = 50
    # Counted exactly up to counts.EXACT_UP_TO, estimated above: Django's COUNT(*) would read every
    # instance listed, on every page.
    paginator = counts.CountingPaginator
    # "5 results (1,000,000 total)" would count every instance on each search.
    show_full_result_count = False
    empty_value_display = "—"
    change_list_template = "django_workflows/admin/instance_change_list.html"

    @admin.display(description="workflow", ordering="workflow_name")
    def workflow(self, instance):
        url = reverse("admin:django_workflows_instance_workflow", args=[instance.workflow_name])
        return format_html(
            '<a href="{}" title="Diagram of {}">{}</a>', url, instance.workflow_name, instance.workflow_name
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, instance):
        return status_badge_html(instance.status)

    @admin.display(description="wake time", ordering="wake_at")
    def wake_time(self, instance):
        return _moment(instance.wake_at)

    # Sorting by it reads the whole table (no index: every replay's release writes the column, and an
    # index would cost each of them more than an occasional sort in the admin).
    @admin.display(description="CPU", ordering="cpu_ms")
    def cpu_time(self, instance):
        return format_html(
            '<span class="dw-cpu" title="CPU time its replays used: run() and its step bodies">{}</span>',
            human_milliseconds(instance.cpu_ms),
        )

    @admin.display(description="created", ordering="created_at")
    def created(self, instance):
        return _moment(instance.created_at)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, instance):
        return _moment(instance.updated_at)

    def get_search_results(self, request, queryset, search_term):
        """The instances whose id begins with the term, as typed (ids are case-sensitive): read from
        the ``dw_instance_unique_by_id`` index, which the id leads (``id_starts_with``), where Django's
        default (the id contains the term, in any case) reads every instance."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.id_starts_with(term), False

    def changelist_view(self, request, extra_context=None):
        refuse_nul(request)
        workflow = request.GET.get(WorkflowFilter.parameter_name) or None
        visible = access.instances_filter(request.user, access.VIEW)
        totals = status_totals(workflow, visible)
        base = reverse("admin:django_workflows_instance_changelist")
        scope = {WorkflowFilter.parameter_name: workflow} if workflow else {}
        status_bar = [
            {
                "status": status,
                "badge": status_badge_html(status),
                "count": count,
                "url": f"{base}?{urlencode({**scope, 'status__exact': status})}",
                "active": request.GET.get("status__exact") == status,
            }
            for status, count in totals.items()
        ]
        extra_context = {
            **(extra_context or {}),
            "status_bar": status_bar,
            "status_bar_total": sum(totals.values(), counts.Count(0)),
            "status_bar_all_url": f"{base}?{urlencode(scope)}" if scope else base,
            "status_bar_workflow": workflow,
            "approvals_count": awaiting_approval().filter(visible).count(),
        }
        return super().changelist_view(request, extra_context)
