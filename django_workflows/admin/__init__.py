"""The admin: instances, their journal and inbox, the approval queue, and each workflow's diagram.

The journal is read-only here. Every button (approve, reject, send an event, pause, resume, terminate,
restart) goes through the instance's handle, the same path as the Python API, so the engine's
conditional updates decide whether a change is allowed; the admin only reports what they said.

One ModelAdmin for ``Instance``, assembled from a mixin per page: the list (``instance_list``), the
instance page (``instance_page``), steering from both (``steering``), the approval queue and its
decisions (``approvals``), discarding from the inbox (``inbox``), downloading a large value kept in
file storage (``stored_values``), and the workflows' pages (``workflows``), over what they share (``base``).
``WorkflowInstancesInline`` (``subject_inline``) shows an object's instances on the object's own page.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from django_workflows.admin.decisions import ApprovalQueue
from django_workflows.admin.page_base import InstanceAdminBase
from django_workflows.admin.inbox_discard import InboxDiscard
from django_workflows.admin.instance_list import InstanceList
from django_workflows.admin.instance_page import InstancePage
from django_workflows.admin.steering_actions import Steering
from django_workflows.admin.stored_values import StoredValueDownload
from django_workflows.admin.subject_inline import WorkflowInstancesInline
from django_workflows.admin.workflow_pages import WorkflowPages
from django_workflows.models import Instance

__all__ = ["InstanceAdmin", "WorkflowInstancesInline"]


@admin.register(Instance)
class InstanceAdmin(InstanceList, InstancePage, Steering, InboxDiscard, StoredValueDownload, ApprovalQueue,
                    WorkflowPages, InstanceAdminBase):
    def get_urls(self):
        """The pages and buttons beyond the list and the instance page, before the ModelAdmin's own
        (whose ``<object_id>/`` would take them)."""

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
            path("<path:object_id>/discard-events/", wrap(self.discard_events_view), name=f"{prefix}_discard_events"),
            path("<path:object_id>/values/<str:sha256>/", wrap(self.stored_value_view),
                 name=f"{prefix}_stored_value"),
            *super().get_urls(),
        ]
