"""The instance list's filters by what instances are about and tagged with: ``?subject=shop.order:42``
(the link of an object's ``WorkflowInstancesInline``) and ``?tag=tenant%3Dacme``."""

from __future__ import annotations

from django.contrib import admin, messages

from django_workflows.errors import InvalidSubject, InvalidTags
from django_workflows.store import tags as instance_tags
from django_workflows.foundations.tag_rules import parse_tag_filter

OFFERED_TAGS = 30


def nothing(queryset):
    """No instance, for a filter it cannot read (said on the page): it must not list everything. Not
    ``none()``, whose empty query the list's counting paginator cannot compile."""
    return queryset.filter(pk__isnull=True)


class TagFilter(admin.SimpleListFilter):
    """A tag, ``key=value``: the first pairs stored are offered; any other may be typed in the address."""

    title = "tag"
    parameter_name = "tag"

    def lookups(self, request, model_admin):
        return [(f"{key}={value}", f"{key}={value}") for key, value in instance_tags.pairs(OFFERED_TAGS)]

    def queryset(self, request, queryset):
        wanted = self.value()
        if not wanted:
            return queryset
        try:
            key, value = parse_tag_filter(wanted, "tag")
        except InvalidTags as exc:
            messages.error(request, str(exc))
            return nothing(queryset)
        return queryset.tagged({key: value})


class SubjectFilter(admin.SimpleListFilter):
    """The row instances are about, ``app_label.model:pk``: set by the link under an object's inline,
    offered nowhere (an instance list has no short list of subjects), shown only when set."""

    title = "subject"
    parameter_name = "subject"

    def lookups(self, request, model_admin):
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        try:
            return queryset.for_subject(self.value())
        except InvalidSubject as exc:
            messages.error(request, str(exc))
            return nothing(queryset)
