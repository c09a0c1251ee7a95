"""How a create asks for a later start: a delay, and a debounce (``create(start_in=...)``, ``debounce=``),
checked as ``django_workflows.client.starts`` checks them, so that a 400 names the field."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_workflows.api.duration_fields import RequestDuration
from django_workflows.api.input_fields import RejectUnknownFields, StrictCharField
from django_workflows.errors import InvalidParams
from django_workflows.client.starts import MAX_DEBOUNCE_KEY, read_debounce, read_duration


@extend_schema_field({"oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "example": "10 minutes"}]})
class StartDelayField(RequestDuration):
    """A duration: milliseconds, or "N unit(s)" ("10 minutes"), checked as create() checks it."""

    example = "10 minutes"

    def check(self, data) -> None:
        read_duration(data, self.field_name)


class DebounceSerializer(RejectUnknownFields, serializers.Serializer):
    key = StrictCharField(max_length=MAX_DEBOUNCE_KEY, trim_whitespace=False,
                          help_text="The triggers of one key (per workflow) make one instance: user-42.")
    period = StartDelayField(help_text="How long after the last trigger the instance starts: \"30 seconds\".")
    max_wait = StartDelayField(required=False, allow_null=True,
                               help_text="How long after the first trigger it starts at the latest, however "
                                         "often triggers come; at least the period.")

    def validate(self, data):
        try:
            read_debounce({key: value for key, value in data.items() if value is not None})
        except InvalidParams as exc:
            raise serializers.ValidationError(str(exc), code="invalid") from None
        return data
