"""The durations a request gives: an instance's retention and its timeout, each milliseconds or "N unit(s)",
checked by the rule the engine applies to them, so a value the engine would refuse is a 400 before anything
is created."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_workflows.shared.deadlines import MAX_TIMEOUT, parse_timeout
from django_workflows.errors import InvalidParams
from django_workflows.shared.instance_retention import MAX_RETENTION, parse_retention_duration


class RequestDuration(serializers.Field):
    """A duration a request gives: milliseconds, or "N unit(s)", checked by the engine's own rule for it
    (``check``), so that what the engine would refuse is a 400 naming the field."""

    example = ""

    def check(self, data) -> None:
        raise NotImplementedError

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float, str)):
            raise serializers.ValidationError(
                f"Expected milliseconds or a string such as {self.example!r}, got {type(data).__name__}.",
                code="invalid")
        try:
            self.check(data)
        except InvalidParams as exc:
            raise serializers.ValidationError(str(exc), code="invalid") from None
        return data


@extend_schema_field({"oneOf": [{"type": "number", "minimum": 0, "maximum": MAX_RETENTION.days * 86_400_000},
                               {"type": "string", "example": "3 days"}]})
class RetentionDurationField(RequestDuration):
    """How long an instance is kept: milliseconds, or "N unit(s)" ("3 days"), at most 365 days."""

    example = "3 days"

    def check(self, data) -> None:
        parse_retention_duration(self.field_name, data)


@extend_schema_field({"oneOf": [{"type": "number", "minimum": 1,
                                 "maximum": MAX_TIMEOUT.days * 86_400_000},
                                {"type": "string", "example": "7 days"}]})
class TimeoutField(RequestDuration):
    """An instance's timeout: milliseconds, or "N unit(s)" ("7 days"), more than zero, at most 10 years."""

    example = "7 days"

    def check(self, data) -> None:
        parse_timeout(data, "timeout")
