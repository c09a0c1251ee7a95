"""The approval queue, and the decision a person sends from it or from the instance page: approve or
reject, sent as the event type the instance's wait declares an approval."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST
from django.template.response import TemplateResponse
from django.urls import reverse

from django_workflows.shared import clock, workflow_access as access
from django_workflows.admin.page_base import PageMixin, refuse_nul
from django_workflows.admin.forms import DecisionForm
from django_workflows.client.approvals import approval_awaited, awaiting_approval, decision_refused
from django_workflows.models import Instance, InstanceStatus
from django_workflows.templatetags.workflows_admin import readable_json

APPROVALS_PER_PAGE = 50


class ApprovalQueue(PageMixin):
    """The queue's page and the decide view behind its buttons and the instance page's."""

    def approvals_view(self, request):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        refuse_nul(request)
        queue = access.scope(awaiting_approval(), request.user, access.VIEW)
        workflow = request.GET.get("workflow") or None
        if workflow:
            queue = queue.for_workflow(workflow)
        page = Paginator(queue, APPROVALS_PER_PAGE).get_page(request.GET.get("page"))
        rows = [
            {
                "instance": instance,
                "awaiting": (awaiting := approval_awaited(instance)),
                "refused": decision_refused(request.user, instance, awaiting),
                "waiting_for": instance.waiting_for,
                "url": reverse("admin:django_workflows_instance_change", args=[instance.pk]),
                "decide_url": reverse("admin:django_workflows_instance_decide", args=[instance.pk]),
                "params": readable_json(instance.params),
            }
            for instance in page.object_list
        ]
        context = self._page_context(
            request,
            "Waiting for approval",
            page=page,
            rows=rows,
            workflow=workflow,
            now=clock.now(),
        )
        return TemplateResponse(request, "django_workflows/admin/approvals.html", context)

    @method_decorator(require_POST)
    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance, form = self._posted_form(request, object_id, DecisionForm)
        if form is not None:
            self._decide(request, instance, form)
        return self._back(request, instance)

    def _decide(self, request: HttpRequest, instance: Instance, form: DecisionForm) -> None:
        """Send the decision ``form`` holds, if the instance still waits at its step for an approval."""
        if instance.status != InstanceStatus.WAITING or not instance.waiting_for:
            self.message_user(
                request,
                f"Nothing was sent: {instance} is {instance.status}, not waiting for an event.",
                messages.ERROR,
            )
        elif form.cleaned_data["step"] != instance.current_step:
            self.message_user(
                request,
                f"Nothing was sent: {instance} no longer waits at step "
                f"{form.cleaned_data['step']!r} but at {instance.current_step!r}; "
                "look at it again before deciding.",
                messages.ERROR,
            )
        elif (event_type := approval_awaited(instance)) is None:
            self.message_user(
                request,
                f"Nothing was sent: {instance} waits for {' or '.join(map(repr, instance.waiting_for))}, "
                f"which workflow {instance.workflow_name!r} does not declare as an approval "
                "(approval: True in its events, or its approvals attribute); send the event with Send an "
                "event if you mean to.",
                messages.ERROR,
            )
        else:
            payload = {"outcome": form.cleaned_data["outcome"]}
            if form.cleaned_data["comment"].strip():
                payload["comment"] = form.cleaned_data["comment"].strip()
            self._send(
                request,
                instance,
                event_type,
                payload,
                f"{form.cleaned_data['outcome'].capitalize()}: event {event_type!r}",
            )
