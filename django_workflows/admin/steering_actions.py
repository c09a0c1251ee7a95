"""Steering: the instance page's pause, resume, terminate and restart buttons, and the list's bulk
actions of the same names, with "Terminate and roll back" and "Restart from the step named below" (the
step's name and its count are typed beside the action). Which change applies to which status is
``transitions.TRANSITIONS``; each is done through the instance's handle, whose conditional update
decides, and the admin reports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST
from django.urls import reverse

from django_workflows.shared import audit, workflow_access as access
from django_workflows.surfaces import bulk_steering
from django_workflows.admin.page_base import PageMixin, handle_for
from django_workflows.errors import InvalidTransition, WorkflowError
from django_workflows.models import Instance, InstanceQuerySet
from django_workflows.shared.transitions import TRANSITIONS, Transition, offered

ROLLBACK_CONFIRM = ("Terminate this instance for good, after undoing its steps that declared an undo "
                    "(newest first)?")


def steering_buttons(instance: Instance) -> list[dict[str, Any]]:
    """The instance page's buttons: the changes an instance in its status accepts, and beside Terminate,
    Terminate and roll back (terminate(rollback=True))."""
    buttons: list[dict[str, Any]] = []
    for transition in offered(instance.status):
        url = reverse("admin:django_workflows_instance_steer", args=[instance.pk, transition.action])
        buttons.append({"action": transition.action, "button": transition.button, "confirm": transition.confirm,
                        "url": url})
        if transition.action == "terminate":
            buttons.append({"action": "terminate", "button": "Terminate and roll back", "confirm": ROLLBACK_CONFIRM,
                            "url": url, "rollback": True})
    return buttons


def _bulk_action(transition: Transition) -> Callable[[Steering, HttpRequest, QuerySet[Instance]], None]:
    """The list's action "<Button> selected instances", named ``<action>_selected`` in the form it posts."""

    @admin.action(description=f"{transition.button} selected instances", permissions=["change"])
    def steer_selected(model_admin: Steering, request: HttpRequest, queryset: QuerySet[Instance]) -> None:
        # The list's queryset comes from the model's manager: an InstanceQuerySet.
        model_admin.steer_selected(request, cast(InstanceQuerySet, queryset), transition.action)

    steer_selected.__name__ = f"{transition.action}_selected"
    return steer_selected


@admin.action(description="Terminate and roll back selected instances", permissions=["change"])
def terminate_and_roll_back_selected(model_admin: Steering, request: HttpRequest, queryset: QuerySet[Instance]
                                     ) -> None:
    model_admin.steer_selected(request, cast(InstanceQuerySet, queryset), "terminate", rollback=True)


@admin.action(description="Restart selected instances from the step named beside", permissions=["change"])
def restart_from_step_selected(model_admin: Steering, request: HttpRequest,
                               queryset: QuerySet[Instance]) -> None:
    from_step = request.POST.get("from_step", "")
    if not from_step:
        model_admin.message_user(
            request, "Nothing changed: type the name of the step to restart from in 'From step' beside the "
                     "action (and which of that name in 'Count').", messages.ERROR)
        return
    count = request.POST.get("count", "") or "1"
    # ASCII digits only ("²".isdigit() is true): anything else goes on as text, for Change to refuse.
    number = int(count) if count.isascii() and count.isdigit() else cast(int, count)
    model_admin.steer_selected(request, cast(InstanceQuerySet, queryset), "restart", from_step=from_step,
                               count=number)


class SteeringActionForm(helpers.ActionForm):
    """The list's action bar, with the step "Restart ... from the step named beside" restarts from."""

    # Not stripped: a step's name is matched as it was journaled.
    from_step = forms.CharField(required=False, strip=False, label="From step", max_length=256)
    # Text, not a number field: an invalid count is reported by the action, not as "No action selected".
    count = forms.CharField(required=False, label="Count", max_length=10,
                            widget=forms.TextInput(attrs={"size": 3, "placeholder": "1"}))


class Steering(PageMixin):
    """The steer view behind the instance page's buttons, and the list's bulk actions."""

    # One bulk action per steering change, in the table's order, so that the list offers what the
    # handle accepts and nothing more; then the variants of terminate and restart.
    actions = (*(_bulk_action(transition) for transition in TRANSITIONS.values()),
               terminate_and_roll_back_selected, restart_from_step_selected)
    action_form = SteeringActionForm

    @method_decorator(require_POST)
    def steer_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if action not in TRANSITIONS:
            raise Http404(f"No such action: {action!r}.")
        instance = self._posted_instance(request, object_id, self.can_steer)
        from_step = request.POST.get("from_step") if action == "restart" else None
        rollback = action == "terminate" and request.POST.get("rollback") == "1"
        try:
            if rollback:
                handle_for(instance).terminate(rollback=True)
            elif from_step:
                count = request.POST.get("count", "1")
                # ASCII digits only: "²".isdigit() is true and int("²") fails. Anything else goes on as
                # text, for restart() to refuse with its message.
                number = int(count) if count.isascii() and count.isdigit() else cast(int, count)
                handle_for(instance).restart(from_step=from_step, count=number)
            else:
                getattr(handle_for(instance), action)()
        except InvalidTransition as exc:
            self.message_user(request, f"Nothing changed: {exc}", messages.WARNING)
        except WorkflowError as exc:
            self.message_user(request, f"Could not {action} {instance}: {exc}", messages.ERROR)
        else:
            done = TRANSITIONS[action].past + (f" from step {from_step!r} #{count}" if from_step else "")
            if rollback:
                done = "queued to roll back, then terminate"
            self.message_user(request, f"Instance {instance} {done}.", messages.SUCCESS)
            self.log_change(request, instance, f"{done.capitalize()}.")
        return self._back(request, instance)

    # Bulk actions on the list.

    def steer_selected(self, request: HttpRequest, queryset: InstanceQuerySet, action: str,
                       **variant: Any) -> None:
        # The selection as it is, whatever the status of each: one the change does not apply to (or,
        # restarting from a step, without it) is reported as refused, where the API and the command line
        # select by the transitions table.
        try:
            change = bulk_steering.Change(action, **variant)
        except WorkflowError as exc:
            self.message_user(request, f"Nothing changed: {exc}", messages.ERROR)
            return
        past = change.past.capitalize()
        outcome = bulk_steering.steer(
            change, access.scope(queryset.for_steering(), request.user, access.STEER).order_by("pk"),
            who=audit.user_sender("admin", request.user),
            done=lambda row: self.log_change(request, row, f"{past} from the list."))
        done = [str(row) for row in outcome.changed]
        refused = [message for _, message in outcome.refused]
        if done:
            self.message_user(
                request, f"{past}: {len(done)} instance{'s' if len(done) != 1 else ''}, {', '.join(done)}."
                if change.variant() else f"{past} {len(done)} instance{'s' if len(done) != 1 else ''}: "
                f"{', '.join(done)}.",
                messages.SUCCESS,
            )
        for reason in refused:
            self.message_user(request, f"Nothing changed: {reason}", messages.WARNING)
