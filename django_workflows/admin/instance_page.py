"""The instance page: its journal a page at a time with the timeline of those steps, its workflow's
diagram marked with its progress, its inbox, the steering buttons, the decision it awaits, and Send an
event. Nothing on it is a form Django saves: the page is read-only and every button posts to a view."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST
from django.urls import reverse

from django_workflows.shared import clock
from django_workflows.admin.page_base import PageMixin
from django_workflows.admin.forms import SendEventForm
from django_workflows.admin.steering_actions import steering_buttons
from django_workflows.client.approvals import approval_awaited, decision_refused
from django_workflows.shared.definition import registry
from django_workflows.reading.describe import (
    describe_children,
    describe_event,
    describe_family,
    describe_parent,
    describe_progress,
    describe_retention,
    describe_step,
)
from django_workflows.reading.drawing.diagram import render_diagram
from django_workflows.reading.drawing.time_axis import human_duration, human_milliseconds
from django_workflows.reading.drawing.timeline import render_timeline
from django_workflows.shared.durations import format_duration
from django_workflows.errors import WorkflowError, WorkflowNotFound
from django_workflows.models import FINISHED_STATUSES, Event, Instance, Step, StepKind
from django_workflows.shared.options import WorkflowOptions
from django_workflows.reading.outline import diagram_for
from django_workflows.templatetags.workflows_admin import status_badge_html

STEPS_PER_PAGE = 50
BUFFERED_SHOWN = 100
RECEIVED_SHOWN = 50
EVENTS_DRAWN = 300


class InstancePage(PageMixin):
    """The ModelAdmin's change form, shown read-only with the context of ``instance_context``."""

    change_form_template = "django_workflows/admin/instance_change_form.html"

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(self.instance_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def instance_context(self, request, instance: Instance) -> dict:
        page = Paginator(Step.objects.journal_of(instance), STEPS_PER_PAGE).get_page(
            request.GET.get("steps_page")
        )
        page_steps = list(page.object_list)
        described = [describe_step(step) for step in page_steps]
        active = instance.status not in FINISHED_STATUSES
        now = clock.now()

        # The events drawn with this page of steps: those its waits consumed, and those received
        # between its first and last step (from the start on the first page, to now on the last).
        events = Event.objects.inbox_of(instance)
        shown = events.around(
            page_steps,
            received_since=page_steps[0].started_at if page.number > 1 and page_steps else None,
            received_until=(
                max(s.ended_at or s.wake_at or s.started_at for s in page_steps)
                if page.has_next() and page_steps
                else None
            ),
        )
        drawn = [describe_event(event, event.consumed_key) for event in shown[:EVENTS_DRAWN]]
        timeline = (
            render_timeline(
                described,
                drawn,
                origin=instance.created_at,
                now=now if active and not page.has_next() else None,
                first_number=page.start_index() or 1,
                current_key=instance.current_step,
            )
            if page_steps
            else None
        )

        buffered = list(events.buffered()[: BUFFERED_SHOWN + 1])
        consumed = list(events.latest_consumed()[:RECEIVED_SHOWN])

        progress = Step.objects.progress_of(instance)
        current_name = instance.current_step.rsplit("-", 1)[0] if instance.current_step and active else None
        diagram_svg, diagram_error = None, ""
        try:
            diagram = diagram_for(instance.workflow_name)
        except WorkflowNotFound as exc:
            diagram_error = str(exc)
        else:
            diagram_error = diagram.error
            if not diagram.error:
                diagram_svg = render_diagram(diagram, progress, current_name)

        try:
            limit = WorkflowOptions.of(registry.get(instance.workflow_name)).cpu_time_limit
            cpu_time_limit = human_milliseconds(limit.total_seconds() * 1000)
        except WorkflowError:  # a workflow this process does not know, or a limit check E019 reports
            cpu_time_limit = None

        awaiting = approval_awaited(instance)
        may_steer = self.can_steer(request, instance)
        waiting_since = Step.objects.began_at(instance, instance.current_step) if awaiting else None
        return {
            "title": str(instance),
            "subtitle": None,
            "instance": instance,
            "status_badge": status_badge_html(instance.status),
            "active": active,
            "now": now,
            "cpu_time": human_milliseconds(instance.cpu_ms),
            "cpu_time_limit": cpu_time_limit,
            "step_time": human_milliseconds(instance.step_wall_ms),
            "steps_page": page,
            # A list: the template shows the page links above and below the journal.
            "steps_page_range": list(
                page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
            ),
            "step_rows": [
                self._step_row(step, data) for step, data in zip(page_steps, described, strict=True)
            ],
            "timeline_svg": timeline,
            "has_patch_markers": any(data["type"] == StepKind.PATCH for data in described),
            "diagram_svg": diagram_svg,
            "diagram_error": diagram_error,
            "buffered_events": buffered[:BUFFERED_SHOWN],
            "more_buffered": len(buffered) > BUFFERED_SHOWN,
            "consumed_events": consumed,
            "steering": steering_buttons(instance) if may_steer else [],
            "restart_from_url": (reverse("admin:django_workflows_instance_steer", args=[instance.pk, "restart"])
                                 if may_steer else None),
            "discard_events_url": (reverse("admin:django_workflows_instance_discard_events", args=[instance.pk])
                                   if may_steer else None),
            "restart_from_confirm": "Restart from this step? The steps from here on, and the events they "
                                    "consumed, are cleared; the steps before it are kept.",
            "awaiting": awaiting,
            "decision_refused": decision_refused(request.user, instance, awaiting),
            "waiting_since": waiting_since,
            "can_send_events": self.can_send_events(request, instance),
            "send_event_form": SendEventForm(
                initial={"type": instance.waiting_for[0] if active and instance.waiting_for else ""}
            ),
            "decide_url": reverse("admin:django_workflows_instance_decide", args=[instance.pk]),
            "send_event_url": reverse("admin:django_workflows_instance_send_event", args=[instance.pk]),
            "workflow_url": reverse(
                "admin:django_workflows_instance_workflow", args=[instance.workflow_name]
            ),
            "retention": self._retention(instance),
            "latest_progress": self._progress(instance),
            "parent": self._linked(describe_parent(instance)),
            "children": [self._linked(child) for child in describe_children(instance)],
            "timeout": format_duration(instance.timeout) if instance.timeout is not None else "",
            "family": self._family(instance),
        }

    @staticmethod
    def _family(instance: Instance) -> dict[str, dict[str, str | None]]:
        """The instances before and after it in its family (step.continue_as_new), each with its id and the
        URL of its page (None if retention deleted it); empty for an instance of no family."""
        ids = describe_family(instance)
        return {link: {"id": ids[link], "url": reverse("admin:django_workflows_instance_change", args=[pk])
                       if ids[link] else None}
                for link, pk in (("predecessor", instance.predecessor_id), ("successor", instance.successor_id))
                if pk is not None}

    @staticmethod
    def _linked(described: dict | None) -> dict | None:
        """A parent or child from describe, with the URL of its page (None if retention deleted it)."""
        if described is None:
            return None
        url = reverse("admin:django_workflows_instance_change", args=[described["pk"]]) if described["id"] else None
        return {**described, "url": url}

    @staticmethod
    def _retention(instance: Instance) -> str:
        """The instance's own retention, chosen at create, as people read it; empty if it chose none."""
        retention = describe_retention(instance)
        if retention is None:
            return ""
        kept = {outcome: "RETENTION_DAYS" if value is None else format_duration(value)
                for outcome, value in retention.items() if outcome != "purge_at"}
        return f"complete: {kept['success']}; errored or terminated: {kept['error']}"

    @staticmethod
    def _progress(instance: Instance) -> dict | None:
        """The latest step.progress as JSON text, with a fraction for a bar when the value is one (0 to 1)
        or says what is done of a total (``{"done": 4, "total": 10}``)."""
        latest = describe_progress(instance.pk)
        if latest is None:
            return None
        value = latest["value"]
        if isinstance(value, dict) and all(isinstance(value.get(key), (int, float)) for key in ("done", "total")):
            fraction = value["done"] / value["total"] if value["total"] > 0 else None
        else:
            fraction = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if fraction is not None and not 0 <= fraction <= 1:
            fraction = None
        return {"text": json.dumps(value, ensure_ascii=False), "at": latest["at"], "fraction": fraction,
                "percent": None if fraction is None else round(fraction * 100)}

    @staticmethod
    def _step_row(step: Step, data: dict) -> dict:
        if step.kind == StepKind.PROGRESS:
            # A step.progress marker: one quiet line saying what it reported.
            result = step.result if isinstance(step.result, dict) else {}
            return {"step": step, "marker": True, "progress": json.dumps(result.get("value"), ensure_ascii=False)}
        if step.kind == StepKind.TAGS:
            # A step.set_tags marker: one quiet line saying what it set.
            result = step.result if isinstance(step.result, dict) else {}
            return {"step": step, "marker": True, "tags_set": result.get("tags") or {}}
        if step.kind == StepKind.PATCH:
            # A step.patched marker: one quiet line, with no "Restart from here" (it is not a step).
            return {"step": step, "marker": True, "after_steps": data.get("after_steps"),
                    "deprecated": bool((step.config or {}).get("deprecated"))}
        end = step.ended_at
        return {
            "step": step,
            # The key is "<name>-<count>": which step of that name this is, for "Restart from here".
            "count": step.key.rpartition("-")[2],
            "duration": human_duration((end - step.started_at).total_seconds()) if end else "",
            "attempts": len(step.attempts or []),
            "failed_attempts": sum(1 for attempt in step.attempts or [] if not attempt.get("success")),
            "next_attempt": data.get("next_attempt"),
            "cpu": human_milliseconds(data["cpu_ms"]) if data.get("cpu_ms") is not None else "",
        }

    @method_decorator(require_POST)
    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance, form = self._posted_form(request, object_id, SendEventForm)
        if form is not None:
            self._send(
                request,
                instance,
                form.cleaned_data["type"],
                form.cleaned_data["payload"],
                f"Event {form.cleaned_data['type']!r}",
            )
        return self._back(request, instance)
