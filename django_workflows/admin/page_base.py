"""What the admin's pages share: the journal is read-only, who may steer and who may send events, the
context of a page of its own, and the path of every button (POST only, through the instance's handle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.forms import Form
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from django_workflows.shared import declared_events, workflow_access as access
from django_workflows.errors import WorkflowError
from django_workflows.client.instances import InstanceHandle
from django_workflows.models import Instance


def refuse_nul(request) -> None:
    """A NUL in the query string is a 400: PostgreSQL cannot compare text with it, and the list's
    filters (Django's own among them) would make that a server error."""
    if any("\x00" in key or "\x00" in value for key, values in request.GET.lists() for value in values):
        raise BadRequest("The query string contains a NUL character.")


def handle_for(instance: Instance) -> InstanceHandle:
    # from_row, not workflows.get(): an instance of a workflow no longer defined can still be steered.
    return InstanceHandle.from_row(instance.workflow_name, instance.instance_id, instance.pk)


class InstanceAdminBase(admin.ModelAdmin):
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

    def get_queryset(self, request):
        # Every page, action and button finds its instances here: one the user may not see is missing.
        return access.scope(super().get_queryset(request), request.user, access.VIEW)

    def can_steer(self, request, instance: Instance | None = None) -> bool:
        """May steer instances at all, or (given one) this instance: its workflow's permission and the
        project's rule (``access``)."""
        return super().has_change_permission(request) and (
            instance is None or access.allows(request.user, access.STEER, instance))

    def can_send_events(self, request, instance: Instance | None = None) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.send_event") and (
            instance is None or access.allows(request.user, access.SEND, instance))

    def _page_context(self, request, title: str, **context) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "media": self.media,
            "can_send_events": self.can_send_events(request),
            **context,
        }

    # The buttons of the instance page and the approval queue: POST only, through the handle.

    def _posted_instance(self, request: HttpRequest, object_id: str, may: Callable[..., bool]) -> Instance:
        """The instance a button (a POST, ``require_POST``) acts on, once the user may press it: ``may`` (a
        ``can_*`` of this class) asked of the model first, then of this instance (tenancy)."""
        if not may(request):
            raise PermissionDenied
        instance = self._instance_or_404(request, object_id)
        if not may(request, instance):
            raise PermissionDenied
        return instance

    def _instance_or_404(self, request: HttpRequest, object_id: str) -> Instance:
        # The buttons act on what the admin shows: an instance the user may not see is missing, even
        # to a user who may send events (who would otherwise learn its status from the messages).
        visible = self.has_view_or_change_permission(request)
        instance = self.get_object(request, unquote(object_id)) if visible else None
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

    def _posted_form(self, request: HttpRequest, object_id: str, form_class: type[Form]) -> tuple[Instance, Any]:
        """The instance an event's form (a POST) is sent to, once the user may send it events, and the
        form when it is valid; an invalid one is None, its errors made messages."""
        instance = self._posted_instance(request, object_id, self.can_send_events)
        form = form_class(request.POST)
        if form.is_valid():
            return instance, form
        self._form_errors(request, form)
        return instance, None

    def _form_errors(self, request, form) -> None:
        # The forms post from pages that cannot show them bound again; their errors become messages.
        for field, errors in form.errors.items():
            label = (form.fields[field].label or field.capitalize()) if field in form.fields else field
            for error in errors:
                self.message_user(request, f"Nothing was sent. {label}: {error}", messages.ERROR)

    def _send(self, request, instance: Instance, event_type: str, payload, what: str) -> None:
        try:
            # Recorded as sent by "admin:<username>".
            handle_for(instance).send_event(
                type=event_type, payload=payload, channel=declared_events.ADMIN, user=request.user
            )
        except WorkflowError as exc:
            self.message_user(request, f"Nothing was sent: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"{what} sent to {instance}.", messages.SUCCESS)
            # The admin's history of the instance records who sent what, beside Event.sender.
            self.log_change(request, instance, f"{what} sent.")


# The base of each page's mixin: InstanceAdminBase for the type checker, which checks the mixin against
# the ModelAdmin it is mixed into (``admin.InstanceAdmin``); object at run time, where that class's own
# bases give the order.
if TYPE_CHECKING:
    PageMixin = InstanceAdminBase
else:
    PageMixin = object
