"""What every request shape of the API is made of: text that is text, and fields it does not know refused."""

from typing import TYPE_CHECKING

from rest_framework import serializers

from django_workflows.shared.routing import HIGHEST_PRIORITY, LOWEST_PRIORITY

PRIORITY_ERROR = (f"A priority is a whole number from {LOWEST_PRIORITY} (the default) to {HIGHEST_PRIORITY} "
                  "(the first to start).")


class StrictCharField(serializers.CharField):
    """A string and nothing else: DRF's CharField would turn ``0`` into ``"0"``, and an id is text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# The serializers RejectUnknownFields is mixed into, for the type checker; object at run time.
if TYPE_CHECKING:
    from rest_framework.serializers import Serializer as _Serializer
else:
    _Serializer = object


class RejectUnknownFields(_Serializer):
    """A field the API does not know is refused, not ignored: a typo must not pass silently."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                raise serializers.ValidationError({field: ["Unknown field."] for field in sorted(unknown)},
                                                  code="unknown_field")
        return super().to_internal_value(data)


class PriorityField(serializers.IntegerField):
    """A priority: one message, naming the range, whatever is wrong with the value, as create() says."""

    def __init__(self, **kwargs):
        kwargs["error_messages"] = {reason: PRIORITY_ERROR
                                    for reason in ("invalid", "min_value", "max_value", "max_string_length")}
        super().__init__(min_value=LOWEST_PRIORITY, max_value=HIGHEST_PRIORITY, **kwargs)
