"""A project's own model with its workflow instances on its page, as docs/guide/admin.md shows."""

from django.contrib import admin

from django_workflows.admin import WorkflowInstancesInline
from tests.testapp.models import SideEffect


@admin.register(SideEffect)
class SideEffectAdmin(admin.ModelAdmin):
    inlines = [WorkflowInstancesInline]
