"""``WorkflowInstancesInline``: an object's workflow instances on the object's own admin page.

    from django_workflows.admin import WorkflowInstancesInline

    @admin.register(Order)
    class OrderAdmin(admin.ModelAdmin):
        inlines = [WorkflowInstancesInline]

It lists the instances bound to the object (``create(subject=order)``), newest first, with their
status and a link to each one's page (its timeline), as far as the user may see them (the
``Instance`` permissions and ``INSTANCE_ACCESS``, as everywhere). Read-only: instances are started
by code and steered from their own page.
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.contenttypes.admin import GenericTabularInline
from django.urls import reverse
from django.utils.html import format_html

from django_workflows.shared import workflow_access as access
from django_workflows.models import Instance


class WorkflowInstancesInline(GenericTabularInline):
    model = Instance
    ct_field = "subject_type"
    ct_fk_field = "subject_id"
    fields = ("instance", "workflow_name", "status_shown", "current_step", "created_at", "ended_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    verbose_name = "workflow instance"
    verbose_name_plural = "workflow instances"
    ordering = ("-created_at", "-id")

    def get_queryset(self, request):
        return access.scope(super().get_queryset(request), request.user, access.VIEW)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        return access.holds_model_permission(request.user, access.VIEW)

    @admin.display(description="instance")
    def instance(self, instance: Instance):
        url = reverse(f"{self.admin_site.name}:django_workflows_instance_change", args=[instance.pk])
        return format_html('<a href="{}" title="Its page and timeline">{}</a>', url, instance.instance_id)

    @admin.display(description="status")
    def status_shown(self, instance: Instance):
        return format_html('<span class="dw-status dw-status-{}">{}</span>', instance.status,
                           instance.get_status_display())
