"""Template helpers for the workflows admin."""

from __future__ import annotations

import json

from django import template
from django.urls import reverse
from django.utils.html import format_html

from django_workflows.shared import large_values
from django_workflows.reading.drawing.time_axis import human_duration, human_milliseconds
from django_workflows.models import InstanceStatus

register = template.Library()


@register.filter
def pretty_json(value) -> str:
    """A JSON value indented for reading. Returned as plain text, so the template escapes it."""
    return readable_json(value, indent=2)


@register.filter
def stored_value_link(value, instance) -> str:
    """A link that downloads ``value`` of ``instance`` if it is a large value kept in file storage (a
    ``$stored`` reference), through the admin's own view and its permission checks; else nothing."""
    reference = large_values.reference_of(value)
    if reference is None:
        return ""
    url = reverse("admin:django_workflows_instance_stored_value", args=[instance.pk, reference.sha256])
    return format_html('<a class="dw-download" href="{}" download>Download the stored value ({} bytes)</a>',
                       url, f"{reference.size:,}")


def readable_json(value, indent=None) -> str:
    """``value`` as JSON text for a page, whatever its depth.

    The API accepts JSON nested as deep as its parser goes (about a thousand levels), deeper than
    the indenting encoder, which recurses in Python on top of the template's own frames, can write
    out; such a value is shown on one line, or described, instead of failing the page.
    """
    for spaces in ([indent, None] if indent is not None else [None]):
        try:
            return json.dumps(value, indent=spaces, ensure_ascii=False, default=str)
        except RecursionError:
            continue
    return "(nested too deeply to show here; the API returns it whole)"


def status_badge_html(status: str):
    label = InstanceStatus(status).label if status in InstanceStatus.values else status
    return format_html('<span class="dw-badge dw-status-{}">{}</span>', status, label.lower())


@register.filter
def status_badge(status: str):
    return status_badge_html(status)


@register.filter
def milliseconds(value) -> str:
    """A CPU or wall time in milliseconds as people read it: "0.42 ms", "12 ms", "31.2 s"."""
    return "" if value is None else human_milliseconds(value)


@register.filter
def duration_between(start, end) -> str:
    if start is None or end is None:
        return ""
    return human_duration((end - start).total_seconds())


@register.inclusion_tag("django_workflows/admin/includes/app_links.html", takes_context=True)
def workflows_admin_links(context):
    """The approval queue and the workflows' diagrams, for the app's admin index."""
    from django_workflows.client.approvals import awaiting_approval

    user = context["request"].user
    can_view = user.has_perm("django_workflows.view_instance") or user.has_perm(
        "django_workflows.change_instance"
    )
    from django_workflows.shared import workflow_access as access

    queue = access.scope(awaiting_approval(), user, access.VIEW)
    return {"can_view": can_view, "approvals_count": queue.count() if can_view else 0}
