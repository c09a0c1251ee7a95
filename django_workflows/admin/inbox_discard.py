"""Discarding from the instance page's inbox what no wait has taken yet: one event, or all those of one
sender (a flood that fills the inbox's quotas). Through the instance's handle, by staff who may steer,
each discard recorded in the admin's history of the instance."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST

from django_workflows.admin.page_base import PageMixin, handle_for


class InboxDiscard(PageMixin):
    @method_decorator(require_POST)
    def discard_events_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._posted_instance(request, object_id, self.can_steer)
        event_id, sender = request.POST.get("event"), request.POST.get("sender")
        if event_id is not None:
            # ASCII digits only: int() would take "²" and " 7 ".
            if not (event_id.isascii() and event_id.isdigit() and len(event_id) < 19):
                raise BadRequest(f"Not an event id: {event_id!r}.")
            discarded = handle_for(instance).discard_events([int(event_id)])
            what = "".join(f"event #{pk} {event_type!r} from {by!r}" for pk, event_type, by in discarded)
        elif sender is not None:
            discarded = handle_for(instance).discard_events(sender=sender)
            what = f"{len(discarded)} event{'s' if len(discarded) != 1 else ''} from {sender!r}"
        else:
            raise BadRequest("Name an event or a sender to discard.")
        if not discarded:
            self.message_user(request, "Nothing was discarded: a wait has taken it, or it is gone.",
                              messages.WARNING)
        else:
            self.message_user(request, f"Discarded {what} from the inbox of {instance}.", messages.SUCCESS)
            self.log_change(request, instance, f"Discarded {what}.")
        return self._back(request, instance)
