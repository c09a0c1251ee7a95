"""Steering: the instance page's pause, resume, terminate and restart buttons, and the list's bulk
actions of the same names. Which change applies to which status is ``transitions.TRANSITIONS``; each is
done through the instance's handle, whose conditional update decides, and the admin reports it."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed
from django.urls import reverse

from django_workflows import access, audit, bulk_steering
from django_workflows.admin.base import PageMixin, handle_for
from django_workflows.errors import InvalidTransition, WorkflowError
from django_workflows.models import Instance
from django_workflows.transitions import TRANSITIONS, offered

ROLLBACK_CONFIRM = ("Terminate this instance for good, after undoing its steps that declared an undo "
                    "(newest first)?")


def steering_buttons(instance: Instance) -> list[dict]:
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


class Steering(PageMixin):
    """The steer view behind the instance page's buttons, and the list's bulk actions."""

    actions = ("pause_selected", "resume_selected", "terminate_selected", "restart_selected")

    def steer_view(self, request, object_id, action):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if action not in TRANSITIONS:
            raise Http404(f"No such action: {action!r}.")
        if not self.can_steer(request):
            raise PermissionDenied
        instance = self._instance_or_404(request, object_id)
        if not self.can_steer(request, instance):
            raise PermissionDenied
        from_step = request.POST.get("from_step") if action == "restart" else None
        rollback = action == "terminate" and request.POST.get("rollback") == "1"
        try:
            if rollback:
                handle_for(instance).terminate(rollback=True)
            elif from_step:
                count = request.POST.get("count", "1")
                # ASCII digits only: "²".isdigit() is true and int("²") fails. Anything else goes on as
                # text, for restart() to refuse with its message.
                number = int(count) if count.isascii() and count.isdigit() else count
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

    def _steer_selected(self, request, queryset, action: str) -> None:
        # The selection as it is, whatever the status of each: one the change does not apply to is
        # reported as refused, where the API and the command line select by the transitions table.
        outcome = bulk_steering.steer(
            action, access.scope(queryset.for_steering(), request.user, access.STEER).order_by("pk"),
            who=audit.user_sender("admin", request.user),
            done=lambda row: self.log_change(request, row, f"{TRANSITIONS[action].past.capitalize()} from the list."))
        done = [str(row) for row in outcome.changed]
        refused = [message for _, message in outcome.refused]
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
