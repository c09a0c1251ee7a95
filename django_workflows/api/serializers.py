"""Request and response shapes. Requests are validated here; everything else is the engine's job.

Responses are written here too: a view answers with ``Serializer(value).data``, ``value`` being what
``django_workflows.reading.describe`` made, so that the schema drf-spectacular draws from these classes and
the answers cannot disagree."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from django_workflows.api.duration_fields import RetentionDurationField, TimeoutField
# RejectUnknownFields and StrictCharField are importable from here, where they were first defined.
from django_workflows.api.input_fields import PriorityField, RejectUnknownFields, StrictCharField
from django_workflows.api.start_input import DebounceSerializer, StartDelayField
from django_workflows.shared.counts import EXACT_UP_TO
from django_workflows.shared.durations import milliseconds
from django_workflows.client.instances import MAX_BATCH
from django_workflows.shared.transitions import TRANSITIONS
from django_workflows.foundations.validation import MAX_INSTANCE_ID, MAX_STEP_NAME


class RetentionInputSerializer(RejectUnknownFields, serializers.Serializer):
    success = RetentionDurationField(required=False, allow_null=True,
                                     help_text="How long a complete instance is kept; left out or null: "
                                               "the RETENTION_DAYS setting.")
    error = RetentionDurationField(required=False, allow_null=True,
                                   help_text="How long an errored or terminated instance is kept; left out "
                                             "or null: the RETENTION_DAYS setting.")


class BatchItemSerializer(RejectUnknownFields, serializers.Serializer):
    """An item of a batch, and what a create takes besides a later start."""

    instance_id = StrictCharField(required=False, max_length=MAX_INSTANCE_ID, allow_blank=False,
                                  trim_whitespace=False,  # " a" is an invalid id, not "a"
                                  help_text="Letters, digits, '-' and '_'; a UUID when left out.")
    params = serializers.JSONField(required=False, allow_null=True, help_text="Any JSON, at most 1 MiB.")
    retention = RetentionInputSerializer(
        required=False, allow_null=True,
        help_text="How long the instance is kept once finished, by how it ended, instead of RETENTION_DAYS.")
    tags = serializers.DictField(
        required=False, allow_null=True, child=serializers.JSONField(),
        help_text="Tags it is searched by: {\"tenant\": \"acme\"}, keys of 1 to 64 letters, digits, '_' "
                  "and '-', values strings of 1 to 255 characters, at most 32.")
    subject = StrictCharField(
        required=False, allow_null=True, max_length=400, trim_whitespace=False,
        help_text="The row it is about, as app_label.model:pk (shop.order:42): read when the instance is "
                  "created, so a row that does not exist is a 400 invalid_subject and nothing is created.")
    timeout = TimeoutField(
        required=False, allow_null=True,
        help_text="Its deadline instead of the workflow's timeout, measured from now: past it, it ends errored "
                  "with WorkflowTimeoutError. Left out or null: the workflow's timeout, if it has one.")
    priority = PriorityField(
        required=False, allow_null=True,
        help_text="0 to 9: a queued instance of higher priority starts first in its queue. Left out or null: "
                  "the workflow's priority.")
    queue = StrictCharField(
        required=False, allow_null=True, max_length=64,
        help_text="The queue its replays are routed to (workers started with --queues serve it); one of the "
                  "project's queues. Left out or null: the workflow's queue.")


class CreateInstanceSerializer(BatchItemSerializer):
    """A create: a batch item's fields, and a later start (which a batch does not take)."""

    start_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text="Start the instance at this time (ISO 8601, with a UTC offset): it is scheduled until then. "
                  "A time that has passed starts it at once.")
    start_in = StartDelayField(
        required=False, allow_null=True,
        help_text="Start the instance after this delay: milliseconds, or \"N unit(s)\" (\"10 minutes\").")
    debounce = DebounceSerializer(
        required=False, allow_null=True,
        help_text="Collapse the triggers of one key into one instance: created scheduled by the first, joined "
                  "by each later trigger within the period (its params win), started once a period passes "
                  "without one. Answered 200 instead of 201 when the trigger joined an instance. Takes no "
                  "instance_id.")

    def validate(self, data):
        asked = [name for name in ("start_at", "start_in", "debounce") if data.get(name) is not None]
        if len(asked) > 1:
            raise serializers.ValidationError({asked[1]: [f"Give one of start_at, start_in and debounce, not "
                                                          f"{' and '.join(asked)}."]}, code="invalid")
        if data.get("debounce") is not None and data.get("instance_id") is not None:
            raise serializers.ValidationError({"instance_id": ["A debounced trigger joins the instance its key "
                                                               "has scheduled; leave instance_id out."]})
        return data


class BatchSerializer(serializers.ListSerializer):
    child = BatchItemSerializer()

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("child", BatchItemSerializer())
        kwargs.setdefault("max_length", MAX_BATCH)
        kwargs.setdefault("allow_empty", False)
        super().__init__(*args, **kwargs)


class RestartFromSerializer(RejectUnknownFields, serializers.Serializer):
    name = StrictCharField(max_length=MAX_STEP_NAME, trim_whitespace=False, help_text="The step's name.")
    count = serializers.IntegerField(min_value=1, default=1,
                                     help_text="Which step of that name: 1 for the first run() reached.")


class StatusChangeSerializer(RejectUnknownFields, serializers.Serializer):
    status = serializers.ChoiceField(choices=[(t.action, t.summary) for t in TRANSITIONS.values()])

    rollback = serializers.BooleanField(
        required=False, help_text="With terminate: first run the undos of the steps that succeeded with one.")

    def get_fields(self):
        # "from" is a Python keyword, so the field is added here rather than declared.
        fields = super().get_fields()
        fields["from"] = RestartFromSerializer(
            required=False, help_text="With restart: run again from this journaled step, keeping the steps "
                                      "before it.")
        return fields

    def validate(self, data):
        if "from" in data and data["status"] != "restart":
            raise serializers.ValidationError({"from": ["Only a restart starts from a step."]})
        if "rollback" in data and data["status"] != "terminate":
            raise serializers.ValidationError({"rollback": ["Only a terminate rolls back."]})
        return data


# A dict of django_workflows.reading.describe on its way out. A key it leaves out stays out (a step's "until" is
# a sleep's alone), where DRF would write null for a missing field that allows null; and the keys keep
# the dict's order, which for a stored one (an attempt, from a jsonb column on PostgreSQL) is the
# database's. No docstring: the schema would give it to every serializer below as its description.
class Described(serializers.Serializer):
    def to_representation(self, instance):
        data = super().to_representation(instance)
        return {key: data[key] for key in instance if key in data}


class MomentField(serializers.DateTimeField):
    """A datetime of describe, written as ``datetime.isoformat()`` writes it, in the zone it was stored
    in: "2025-01-01T12:00:00.250000+00:00". DRF's DateTimeField would follow the project's
    ``REST_FRAMEWORK`` (its DATETIME_FORMAT), move it to the current time zone and write UTC as "Z"."""

    def to_representation(self, value):
        return value.isoformat()


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


class AttemptSerializer(Described):
    attempt = serializers.IntegerField()
    start = MomentField()
    end = MomentField()
    success = serializers.BooleanField()
    cpu_ms = serializers.FloatField(
        required=False, help_text="CPU time its body used, in milliseconds (absent from attempts journaled "
                                  "before it was measured).")
    wall_ms = serializers.FloatField(required=False, help_text="How long its body took, in milliseconds.")
    error = serializers.DictField(required=False)


class StepSerializer(Described):
    name = serializers.CharField()
    key = serializers.CharField()
    type = serializers.ChoiceField(
        choices=["do", "sleep", "waitForEvent", "patch", "tags"],
        help_text="patch: not a step but the marker of a step.patched(change id), named after the change id, "
                  "that run() took the patched code there. tags: not a step but the marker of a step.set_tags, "
                  "its output the tags it set ({tags, after_steps}).")
    status = serializers.CharField()
    start = MomentField(allow_null=True)
    end = MomentField(allow_null=True)
    config = serializers.JSONField(allow_null=True)
    success = serializers.BooleanField(allow_null=True)
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    attempts = AttemptSerializer(many=True, required=False)
    cpu_ms = serializers.FloatField(required=False, allow_null=True,
                                    help_text="A step.do's CPU time over its attempts, in milliseconds.")
    wall_ms = serializers.FloatField(required=False, allow_null=True,
                                     help_text="A step.do's time over its attempts, in milliseconds.")
    until = MomentField(required=False, allow_null=True)
    deadline = MomentField(required=False, allow_null=True)
    next_attempt = MomentField(required=False, allow_null=True)
    after_steps = serializers.IntegerField(
        required=False, allow_null=True, help_text="A marker's place: how many steps run() had called.")


class EventSerializer(Described):
    type = serializers.CharField()
    payload = serializers.JSONField(allow_null=True)
    received = MomentField()
    sender = serializers.CharField(allow_blank=True)
    consumed_by = serializers.CharField(allow_null=True)
    consumed = MomentField(allow_null=True)


class InstanceSummarySerializer(Described):
    id = serializers.CharField()
    workflow = serializers.CharField()
    status = serializers.CharField()
    version = serializers.CharField(
        allow_blank=True, help_text="The code version it was created under: its workflow's version attribute, "
                                    "else the VERSION setting; empty when neither was set.")
    queued = MomentField()
    start = MomentField(allow_null=True)
    end = MomentField(allow_null=True)
    modified = MomentField()
    wake_at = MomentField(allow_null=True)
    current_step = serializers.CharField(allow_blank=True)
    waiting_reason = serializers.CharField(
        allow_null=True, help_text="Why a waiting instance cannot run yet, when its steps do not say."
    )
    subject = serializers.CharField(
        allow_null=True, help_text="The row it is about, create(subject=...), as app_label.model:pk "
                                   "(shop.order:42); null when it is about none.")
    queue = serializers.CharField(help_text="The queue its replays are routed to (django_workflows.shared.routing).")
    priority = serializers.IntegerField(help_text="0 to 9: of the queued instances, a higher one starts first.")


class InstancePageSerializer(Described):
    count = serializers.IntegerField(
        help_text=f"How many instances match: exact up to {EXACT_UP_TO:,}, PostgreSQL's estimate above that "
                  "(see count_estimated).")
    count_estimated = serializers.BooleanField(
        help_text="Whether count is the database's estimate: counting a million instances would read them all.")
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = InstanceSummarySerializer(many=True)


class PageSerializer(Described):
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    count = serializers.IntegerField()


class DetailPagesSerializer(Described):
    per_page = serializers.IntegerField()
    steps = PageSerializer(help_text="Ask for another page with ?steps_page=.")
    events = PageSerializer(help_text="Ask for another page with ?events_page=.")


@extend_schema_field({"type": "number"})
class MillisecondsField(serializers.Field):
    """A duration of describe (a ``timedelta``), written in milliseconds as Cloudflare writes one."""

    def to_representation(self, value):
        return milliseconds(value)


class RetentionSerializer(Described):
    success = MillisecondsField(
        allow_null=True,
        help_text="Milliseconds a complete instance is kept; null: the RETENTION_DAYS setting.")
    error = MillisecondsField(
        allow_null=True,
        help_text="Milliseconds an errored or terminated instance is kept; null: the RETENTION_DAYS setting.")
    purge_at = MomentField(
        allow_null=True,
        help_text="When the instance is deleted, once it has ended with a retention of its own.")


class ParentSerializer(Described):
    workflow = serializers.CharField(allow_null=True, help_text="null if the parent was deleted (retention).")
    id = serializers.CharField(allow_null=True)
    step = serializers.CharField(help_text="The key of the parent's step that started this child.")
    on_parent_end = serializers.ChoiceField(
        choices=["terminate", "abandon"],
        help_text="What the parent's terminate or restart does to this child while it runs.")


class ChildSerializer(Described):
    workflow = serializers.CharField()
    id = serializers.CharField()
    status = serializers.CharField()
    step = serializers.CharField(help_text="The key of this instance's step that started the child.")
    on_parent_end = serializers.ChoiceField(choices=["terminate", "abandon"])


class NamedErrorSerializer(Described):
    name = serializers.CharField()
    message = serializers.CharField(allow_blank=True)


class RollbackSerializer(Described):
    outcome = serializers.ChoiceField(choices=["complete", "errored"],
                                      help_text="complete: every undo ran; errored: one failed for good.")
    error = NamedErrorSerializer(allow_null=True, help_text="The undo's error ({name, message}) when errored.")


class ProgressSerializer(Described):
    value = serializers.JSONField(allow_null=True, help_text="What step.progress() reported (typed values in the "
                                                             "journal's tagged form, as the output).")
    at = serializers.DateTimeField(help_text="When it was reported.")


class InstanceSerializer(InstanceSummarySerializer):
    params = serializers.JSONField(allow_null=True)
    tags = serializers.DictField(child=serializers.CharField(), help_text="Its tags, by key: those given at "
                                 "create and those step.set_tags set.")
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    rollback = RollbackSerializer(
        allow_null=True, help_text="Cloudflare's status().rollback, once a rollback ran (on error or terminate "
                                   "with rollback); null if none did. error.rollback keeps its details.")
    retention = RetentionSerializer(allow_null=True, help_text="The retention chosen at create; null: the "
                                                               "RETENTION_DAYS setting.")
    parent = ParentSerializer(allow_null=True, help_text="The instance whose step.child() started this one; "
                                                         "null if none did.")
    timeout = MillisecondsField(allow_null=True, help_text="Milliseconds it may take, fixed when it was "
                                                          "created; null: no deadline.")
    deadline = MomentField(allow_null=True, help_text="When it ends errored with WorkflowTimeoutError if it has "
                                                      "not ended: its creation (or last restart) plus its timeout.")
    predecessor = serializers.CharField(allow_null=True, help_text="The id of the instance that continued as new "
                                                                   "as this one (step.continue_as_new); null if none.")
    successor = serializers.CharField(allow_null=True, help_text="The id of the instance this one continued as "
                                                                 "new as; null if it did not.")
    children = ChildSerializer(many=True, help_text="The instances its step.child() calls started (the "
                                                    "first 100), oldest first.")
    progress = ProgressSerializer(allow_null=True, help_text="The latest step.progress() it reported; null if "
                                  "none (since its last restart). The stream/ endpoint follows it as it changes.")
    cpu_ms = serializers.FloatField(
        help_text="Milliseconds of CPU time its replays used (run() and the step bodies; waiting does not "
                  "count), over its life, added by each replay as it ends.")
    step_wall_ms = serializers.FloatField(help_text="Milliseconds its step attempts took, end to end.")
    steps = StepSerializer(many=True, help_text="One page of the journal, oldest first.")
    events = EventSerializer(many=True, help_text="One page of the inbox, oldest first.")
    pages = DetailPagesSerializer()


class DeclaredEventSerializer(Described):
    type = serializers.CharField()
    permission = serializers.CharField(allow_null=True)
    webhook = serializers.BooleanField(help_text="Accepted only signed, at the webhook endpoint.")
    approval = serializers.BooleanField(help_text="Sent by the admin's Approve and Reject buttons.")
    schema = serializers.JSONField(allow_null=True, help_text="The JSON Schema its payload must match.")


class WorkflowLimitsSerializer(Described):
    concurrency = serializers.IntegerField(
        allow_null=True, help_text="How many instances may run at once, across every worker; null: no limit.")
    rate_limit = serializers.CharField(
        allow_null=True, help_text="Starts allowed in any sliding window, such as '100/minute'; null: no limit.")
    running = serializers.IntegerField(
        help_text="Instances holding a slot now: a replay running with a live lease (sleeping and waiting "
                  "instances hold none).")
    queued = serializers.IntegerField(help_text="Instances waiting for a replay (for a slot, at the limit).")
    recent_starts = serializers.IntegerField(
        allow_null=True, help_text="First replays within the rate limit's window; null without a rate limit.")


class WorkflowScheduleSerializer(Described):
    cron = serializers.CharField(help_text="The cron expression, as the worker reads it.")
    timezone = serializers.CharField(help_text="The time zone its slots are in.")
    catch_up = serializers.CharField(help_text="What a worker does with the slots missed while none ran.")
    id_prefix = serializers.CharField(
        allow_null=True, help_text="The start of the ids of the instances it creates, one per slot.")
    next = serializers.ListField(child=serializers.DateTimeField(), help_text="Its next three slots.")
    last_slot = serializers.DateTimeField(
        allow_null=True, help_text="The last slot a worker created an instance for; null before the first.")
    error = serializers.CharField(
        allow_null=True, help_text="Why no worker runs it (the system check's complaint); null when it runs.")


class WorkflowSerializer(Described):
    name = serializers.CharField()
    class_name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    step_limit = serializers.IntegerField(
        help_text="The steps an instance may take: the class's step_limit (at most 25,000), else the "
                  "STEP_LIMIT setting.")
    step_limit_from_setting = serializers.BooleanField(
        help_text="Whether step_limit is the STEP_LIMIT setting's (the class sets none).")
    cpu_time_limit_ms = serializers.FloatField(
        allow_null=True, help_text="The CPU time one replay may use, in milliseconds, when the class sets "
                                   "it; null: the CPU_TIME_LIMIT setting.")
    instances = serializers.DictField(child=serializers.IntegerField())
    events = DeclaredEventSerializer(many=True, allow_null=True,
                                     help_text="The event types it accepts; null when it accepts any.")
    limits = WorkflowLimitsSerializer(allow_null=True,
                                      help_text="Its concurrency and rate limits; null when it declares none.")
    schedules = WorkflowScheduleSerializer(many=True, help_text="Its cron schedules; empty when it has none.")


class EventAcceptedSerializer(Described):
    accepted = serializers.BooleanField()
    event_id = serializers.IntegerField(help_text="The stored event; the same for a repeat of its Idempotency-Key.")
    instance = InstanceSummarySerializer(
        allow_null=True, help_text="The instance after the event; null for a sender who may not view it.")
    type = serializers.CharField()
