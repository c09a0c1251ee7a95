"""The workflows' pages: every workflow defined, with its instances counted by status, and one
workflow's description, diagram and ``run()`` source."""

from __future__ import annotations

import inspect
import textwrap
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import reverse

from django_workflows.shared import workflow_access as access
from django_workflows.admin.page_base import PageMixin
from django_workflows.shared.definition import registry
from django_workflows.reading.describe import describe_limits, describe_workflow, workflow_status_totals
from django_workflows.reading.drawing.diagram import render_diagram
from django_workflows.errors import WorkflowNotFound
from django_workflows.reading.outline import diagram_for
from django_workflows.templatetags.workflows_admin import status_badge_html


class WorkflowPages(PageMixin):
    """The list of workflows, and each one's page, which the list's workflow column links to."""

    def workflows_view(self, request):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        counts = workflow_status_totals(within=access.instances_filter(request.user, access.VIEW))
        rows = []
        for name in registry.names():
            if not access.knows_workflow(request.user, name):
                continue
            cls = registry.get(name)
            rows.append(
                {
                    "name": name,
                    "class_name": f"{cls.__module__}.{cls.__qualname__}",
                    "description": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
                    "url": reverse("admin:django_workflows_instance_workflow", args=[name]),
                    "counts": self._count_badges(name, counts.get(name, {})),
                    "limits": describe_limits(cls),
                }
            )
        return TemplateResponse(
            request,
            "django_workflows/admin/workflows.html",
            self._page_context(request, "All workflows", rows=rows),
        )

    @staticmethod
    def _count_badges(name: str, counts: dict) -> list[dict]:
        base = reverse("admin:django_workflows_instance_changelist")
        return [
            {
                "badge": status_badge_html(status),
                "count": count,
                "url": f"{base}?{urlencode({'workflow': name, 'status__exact': status})}",
            }
            for status, count in counts.items()
            if count
        ]

    def workflow_view(self, request, name):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        try:
            if not access.knows_workflow(request.user, name):
                raise WorkflowNotFound(f"No workflow named {name!r}.")
            description = describe_workflow(name, access.instances_filter(request.user, access.VIEW))
        except WorkflowNotFound:
            # Not the engine's message, which lists the workflows defined.
            raise Http404(f"No workflow named {name!r}.") from None
        diagram = diagram_for(name)
        source, defined_in = "", ""
        try:
            owner = next(klass for klass in inspect.getmro(registry.get(name)) if "run" in vars(klass))
            lines, first_line = inspect.getsourcelines(vars(owner)["run"])
        except (OSError, TypeError, StopIteration):
            pass
        else:
            source = textwrap.dedent("".join(lines))
            # Where a developer finds run(), by its dotted name: the server's path to the file is
            # none of the page's business.
            defined_in = f"{owner.__module__}.{owner.__qualname__}.run, line {first_line}"
        scope = urlencode({"workflow": name})
        context = self._page_context(
            request,
            f"Workflow {name}",
            workflow=description,
            diagram=diagram,
            diagram_svg=None if diagram.error else render_diagram(diagram),
            source=source,
            defined_in=defined_in,
            counts=self._count_badges(name, description["instances"]),
            list_url=f"{reverse('admin:django_workflows_instance_changelist')}?{scope}",
            approvals_url=f"{reverse('admin:django_workflows_instance_approvals')}?{scope}",
        )
        return TemplateResponse(request, "django_workflows/admin/workflow.html", context)
