"""The admin: instances, their journal and inbox, the approval queue, and each workflow's diagram.

The journal is read-only here. Every button (approve, reject, send an event, pause, resume, terminate,
restart) goes through the instance's handle, the same path as the Python API, so the engine's
conditional updates decide whether a change is allowed; the admin only reports what they said.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import BadRequest, PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, F, Q
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.timezone import localtime

from django_workflows import audit, clock, declared_events
from django_workflows.approvals import approval_awaited, awaiting_approval, decision_refused
from django_workflows.definition import registry
from django_workflows.describe import describe_event, describe_step, describe_workflow, status_counts
from django_workflows.drawing.diagram import render_diagram
from django_workflows.drawing.timeline import human_duration, render_timeline, when
from django_workflows.errors import InvalidTransition, WorkflowError, WorkflowNotFound
from django_workflows.instances import InstanceHandle
from django_workflows.models import FINISHED_STATUSES, Event, Instance, InstanceStatus, Step
from django_workflows.outline import diagram_for
from django_workflows.templatetags.workflows_admin import readable_json, status_badge_html
from django_workflows.transitions import TRANSITIONS, offered

STEPS_PER_PAGE = 50
APPROVALS_PER_PAGE = 50
BUFFERED_SHOWN = 100
RECEIVED_SHOWN = 50
EVENTS_DRAWN = 300

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


def refuse_nul(request) -> None:
    """A NUL in the query string is a 400: PostgreSQL cannot compare text with it, and the list's
    filters (Django's own among them) would make that a server error."""
    if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
        raise BadRequest("The query string contains a NUL character.")


def handle_for(instance: Instance) -> InstanceHandle:
    # from_row, not workflows.get(): an instance of a workflow no longer defined can still be steered.
    return InstanceHandle.from_row(instance.workflow_name, instance.instance_id, instance.pk)


class DecisionForm(forms.Form):
    outcome = forms.ChoiceField(choices=[("approved", "Approve"), ("rejected", "Reject")])
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    # The wait the person saw: if the instance has moved on to another wait since, the decision is not
    # sent to that one.
    step = forms.CharField(max_length=300, widget=forms.HiddenInput)


class SendEventForm(forms.Form):
    type = forms.CharField(label="Event type", max_length=100)
    payload = forms.CharField(
        label="Payload (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="Any JSON value; empty sends null.",
    )

    def clean_payload(self):
        text = self.cleaned_data["payload"].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:  # JSONDecodeError, and an integer of more than 4,300 digits
            raise forms.ValidationError(f"The payload is not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("The payload is nested too deeply.") from None


class WorkflowFilter(admin.SimpleListFilter):
    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request, model_admin):
        # Workflows defined now, and any whose instances remain after its class was removed.
        stored = Instance.objects.order_by().values_list("workflow_name", flat=True).distinct()
        return [(name, name) for name in sorted(set(registry.names()) | set(stored))]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(workflow_name=self.value())
        return queryset


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin):
    list_display = (
        "instance_id",
        "workflow",
        "status_badge",
        "current_step",
        "wake_time",
        "created",
        "updated",
    )
    list_display_links = ("instance_id",)
    list_filter = (WorkflowFilter, "status", "created_at")
    search_fields = ("instance_id",)
    list_per_page = 50
    empty_value_display = "—"
    actions = ("pause_selected", "resume_selected", "terminate_selected", "restart_selected")
    change_list_template = "django_workflows/admin/instance_change_list.html"
    change_form_template = "django_workflows/admin/instance_change_form.html"

    class Media:
        css = {"all": ("django_workflows/admin.css",)}

    # The journal is the engine's: nothing here adds, edits or deletes rows directly.

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        # Without an object this is "may steer instances" (the list's actions); an instance's own
        # form is never saved, so its page is read-only whatever the user may do.
        return obj is None and super().has_change_permission(request)

    def can_steer(self, request) -> bool:
        return super().has_change_permission(request)

    def can_send_events(self, request) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.send_event")

    # The list.

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

    @admin.display(description="created", ordering="created_at")
    def created(self, instance):
        return _moment(instance.created_at)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, instance):
        return _moment(instance.updated_at)

    def changelist_view(self, request, extra_context=None):
        refuse_nul(request)
        workflow = request.GET.get(WorkflowFilter.parameter_name) or None
        per_workflow = status_counts(workflow)
        totals = dict.fromkeys(InstanceStatus.values, 0)
        for counts in per_workflow.values():
            for status, count in counts.items():
                totals[status] = totals.get(status, 0) + count
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
            "status_bar_total": sum(totals.values()),
            "status_bar_all_url": f"{base}?{urlencode(scope)}" if scope else base,
            "status_bar_workflow": workflow,
            "approvals_count": awaiting_approval().count(),
        }
        return super().changelist_view(request, extra_context)

    # Bulk actions on the list.

    def _steer_selected(self, request, queryset, action: str) -> None:
        done, refused = [], []
        for instance in queryset.only("pk", "instance_id", "workflow_name"):
            try:
                getattr(handle_for(instance), action)()
            except WorkflowError as exc:
                refused.append(str(exc))
            else:
                done.append(str(instance))
                self.log_change(request, instance, f"{TRANSITIONS[action].past.capitalize()} from the list.")
        if done:
            self.message_user(
                request,
                f"{TRANSITIONS[action].past.capitalize()} {len(done)} "
                f"instance{'s' if len(done) != 1 else ''}: {', '.join(done)}.",
                messages.SUCCESS,
            )
        for reason in refused:
            self.message_user(request, f"Nothing changed: {reason}", messages.WARNING)

    @admin.action(description="Pause selected instances", permissions=["change"])
    def pause_selected(self, request, queryset):
        self._steer_selected(request, queryset, "pause")

    @admin.action(description="Resume selected instances", permissions=["change"])
    def resume_selected(self, request, queryset):
        self._steer_selected(request, queryset, "resume")

    @admin.action(description="Terminate selected instances", permissions=["change"])
    def terminate_selected(self, request, queryset):
        self._steer_selected(request, queryset, "terminate")

    @admin.action(description="Restart selected instances", permissions=["change"])
    def restart_selected(self, request, queryset):
        self._steer_selected(request, queryset, "restart")

    # URLs of the pages and buttons beyond the list and the instance page.

    def get_urls(self):
        def wrap(view):
            return self.admin_site.admin_view(view)

        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("approvals/", wrap(self.approvals_view), name=f"{prefix}_approvals"),
            path("workflows/", wrap(self.workflows_view), name=f"{prefix}_workflows"),
            path("workflow/<str:name>/", wrap(self.workflow_view), name=f"{prefix}_workflow"),
            path("<path:object_id>/steer/<str:action>/", wrap(self.steer_view), name=f"{prefix}_steer"),
            path("<path:object_id>/decide/", wrap(self.decide_view), name=f"{prefix}_decide"),
            path("<path:object_id>/send-event/", wrap(self.send_event_view), name=f"{prefix}_send_event"),
            *super().get_urls(),
        ]

    def _page_context(self, request, title: str, **context) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "media": self.media,
            "can_send_events": self.can_send_events(request),
            **context,
        }

    # The instance page.

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(self.instance_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def instance_context(self, request, instance: Instance) -> dict:
        steps = Step.objects.filter(instance_id=instance.pk).order_by("id")
        page = Paginator(steps, STEPS_PER_PAGE).get_page(request.GET.get("steps_page"))
        page_steps = list(page.object_list)
        described = [describe_step(step) for step in page_steps]
        active = instance.status not in FINISHED_STATUSES
        now = clock.now()

        # The events drawn with this page of steps: those its waits consumed, and those received
        # between its first and last step (from the start on the first page, to now on the last).
        events = Event.objects.filter(instance_id=instance.pk).annotate(consumed_key=F("consumed_by__key"))
        in_range = {}
        if page.number > 1 and page_steps:
            in_range["received_at__gte"] = page_steps[0].started_at
        if page.has_next() and page_steps:
            in_range["received_at__lte"] = max(s.ended_at or s.wake_at or s.started_at for s in page_steps)
        shown = (
            events.filter(Q(consumed_by__in=[step.pk for step in page_steps]) | Q(**in_range))
            if in_range
            else events
        )
        drawn = [
            describe_event(event, event.consumed_key)
            for event in shown.order_by("received_at", "id")[:EVENTS_DRAWN]
        ]
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

        buffered = list(
            events.filter(consumed_by__isnull=True).order_by("received_at", "id")[: BUFFERED_SHOWN + 1]
        )
        consumed = list(
            events.filter(consumed_by__isnull=False).order_by("-received_at", "-id")[:RECEIVED_SHOWN]
        )

        progress: dict[str, dict[str, int]] = {}
        for row in (
            Step.objects.filter(instance_id=instance.pk)
            .values("name", "status")
            .annotate(n=Count("id"))
            .order_by()
        ):
            progress.setdefault(row["name"], {})[row["status"]] = row["n"]
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

        can_steer = self.can_steer(request)
        steering = [
            {
                "action": transition.action,
                "button": transition.button,
                "confirm": transition.confirm,
                "url": reverse("admin:django_workflows_instance_steer",
                               args=[instance.pk, transition.action]),
            }
            for transition in (offered(instance.status) if can_steer else ())
        ]
        awaiting = approval_awaited(instance)
        waiting_since = (
            Step.objects.filter(instance_id=instance.pk, key=instance.current_step)
            .values_list("started_at", flat=True)
            .first()
            if awaiting
            else None
        )
        return {
            "title": str(instance),
            "subtitle": None,
            "instance": instance,
            "status_badge": status_badge_html(instance.status),
            "active": active,
            "now": now,
            "steps_page": page,
            # A list: the template shows the page links above and below the journal.
            "steps_page_range": list(
                page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
            ),
            "step_rows": [
                self._step_row(step, data) for step, data in zip(page_steps, described, strict=True)
            ],
            "timeline_svg": timeline,
            "diagram_svg": diagram_svg,
            "diagram_error": diagram_error,
            "buffered_events": buffered[:BUFFERED_SHOWN],
            "more_buffered": len(buffered) > BUFFERED_SHOWN,
            "consumed_events": consumed,
            "steering": steering,
            "awaiting": awaiting,
            "decision_refused": decision_refused(request.user, instance, awaiting),
            "waiting_since": waiting_since,
            "can_send_events": self.can_send_events(request),
            "send_event_form": SendEventForm(
                initial={"type": instance.waiting_for[0] if active and instance.waiting_for else ""}
            ),
            "decide_url": reverse("admin:django_workflows_instance_decide", args=[instance.pk]),
            "send_event_url": reverse("admin:django_workflows_instance_send_event", args=[instance.pk]),
            "workflow_url": reverse(
                "admin:django_workflows_instance_workflow", args=[instance.workflow_name]
            ),
        }

    @staticmethod
    def _step_row(step: Step, data: dict) -> dict:
        end = step.ended_at
        return {
            "step": step,
            "duration": human_duration((end - step.started_at).total_seconds()) if end else "",
            "attempts": len(step.attempts or []),
            "failed_attempts": sum(1 for attempt in step.attempts or [] if not attempt.get("success")),
            "next_attempt": when(data.get("next_attempt")),
        }

    # The buttons of the instance page and the approval queue: POST only, through the handle.

    def _instance_or_404(self, request, object_id) -> Instance:
        instance = self.get_object(request, unquote(object_id))
        if instance is None:
            raise Http404(f"No instance with primary key {object_id!r}.")
        return instance

    def _back(self, request, instance: Instance) -> HttpResponseRedirect:
        target = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            target = reverse("admin:django_workflows_instance_change", args=[instance.pk])
        return HttpResponseRedirect(target)

    def steer_view(self, request, object_id, action):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if action not in TRANSITIONS:
            raise Http404(f"No such action: {action!r}.")
        if not self.can_steer(request):
            raise PermissionDenied
        instance = self._instance_or_404(request, object_id)
        try:
            getattr(handle_for(instance), action)()
        except InvalidTransition as exc:
            self.message_user(request, f"Nothing changed: {exc}", messages.WARNING)
        except WorkflowError as exc:
            self.message_user(request, f"Could not {action} {instance}: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"Instance {instance} {TRANSITIONS[action].past}.", messages.SUCCESS)
            self.log_change(request, instance, f"{TRANSITIONS[action].past.capitalize()}.")
        return self._back(request, instance)

    def _form_errors(self, request, form) -> None:
        # The forms post from pages that cannot show them bound again; their errors become messages.
        for field, errors in form.errors.items():
            label = (form.fields[field].label or field.capitalize()) if field in form.fields else field
            for error in errors:
                self.message_user(request, f"Nothing was sent. {label}: {error}", messages.ERROR)

    def _send(self, request, instance: Instance, event_type: str, payload, what: str) -> None:
        try:
            declared_events.authorize(instance.workflow_name, event_type, declared_events.ADMIN, request.user)
            handle_for(instance).send_event(
                type=event_type, payload=payload, sender=audit.user_sender("admin", request.user)
            )
        except WorkflowError as exc:
            self.message_user(request, f"Nothing was sent: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"{what} sent to {instance}.", messages.SUCCESS)
            # The admin's history of the instance records who sent what, beside Event.sender.
            self.log_change(request, instance, f"{what} sent.")

    def decide_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.can_send_events(request):
            raise PermissionDenied
        instance = self._instance_or_404(request, object_id)
        form = DecisionForm(request.POST)
        if not form.is_valid():
            self._form_errors(request, form)
        elif instance.status != InstanceStatus.WAITING or not instance.waiting_for:
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
        return self._back(request, instance)

    def send_event_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.can_send_events(request):
            raise PermissionDenied
        instance = self._instance_or_404(request, object_id)
        form = SendEventForm(request.POST)
        if not form.is_valid():
            self._form_errors(request, form)
        else:
            self._send(
                request,
                instance,
                form.cleaned_data["type"],
                form.cleaned_data["payload"],
                f"Event {form.cleaned_data['type']!r}",
            )
        return self._back(request, instance)

    # The approval queue.

    def approvals_view(self, request):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        refuse_nul(request)
        queue = awaiting_approval()
        workflow = request.GET.get("workflow") or None
        if workflow:
            queue = queue.filter(workflow_name=workflow)
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

    # Workflows and their diagrams.

    def workflows_view(self, request):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        counts = status_counts()
        rows = []
        for name in registry.names():
            cls = registry.get(name)
            rows.append(
                {
                    "name": name,
                    "class_name": f"{cls.__module__}.{cls.__qualname__}",
                    "description": (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
                    "url": reverse("admin:django_workflows_instance_workflow", args=[name]),
                    "counts": self._count_badges(name, counts.get(name, {})),
                }
            )
        return TemplateResponse(
            request,
            "django_workflows/admin/workflows.html",
            self._page_context(request, "All workflows", rows=rows),
        )

    @staticmethod
    def _count_badges(name: str, counts: dict[str, int]) -> list[dict]:
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
            description = describe_workflow(name)
        except WorkflowNotFound as exc:
            raise Http404(str(exc)) from None
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
