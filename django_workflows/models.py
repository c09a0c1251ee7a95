"""The tables that are the truth: instances, their journal of steps, and their event inbox."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from django.contrib.contenttypes.fields import GenericForeignKey
from django.db import models
from django.db.models import Count, F, Q

# The queries on instances live in a module of their own; projects import them from here.
from django_workflows.foundations.instance_queries import InstanceQuerySet as InstanceQuerySet
from django_workflows.foundations.instance_queries import with_tags as with_tags
from django_workflows.foundations.inbox_queries import EventQuerySet as EventQuerySet
from django_workflows.foundations.lookups import HoldsAnyOf
# Defined beside the models at first: projects and the package import them from here too.
from django_workflows.foundations.statuses import ACTIVE_STATUSES as ACTIVE_STATUSES
from django_workflows.foundations.statuses import FINISHED_STATUSES as FINISHED_STATUSES
from django_workflows.foundations.statuses import MARKER_KINDS as MARKER_KINDS
from django_workflows.foundations.statuses import InstanceStatus, ParentEndPolicy, StepKind, StepStatus


class Instance(models.Model):
    """One run of a workflow, identified by (workflow name, instance id)."""

    workflow_name = models.CharField(max_length=255)
    instance_id = models.CharField(max_length=100)
    params = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=InstanceStatus.choices, default=InstanceStatus.QUEUED)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True, help_text="{name, message} when errored.")
    traceback = models.TextField(blank=True, default="")

    wake_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When a waiting instance is next due; when a scheduled one starts; when a queued one a "
                  "concurrency limit holds back reaches its deadline.")
    # Nullable, so that a previous release's worker inserts instances without it.
    debounce_key = models.CharField(
        max_length=255, null=True, blank=True, default=None,
        help_text="create(debounce=...)'s key: while it is scheduled, triggers with this key join this instance.",
    )
    waiting_for = models.JSONField(
        null=True, blank=True, help_text="The event types the instance waits for, if it waits for any."
    )
    current_step = models.CharField(max_length=300, blank=True, default="")
    # db_default as well: during a rolling deploy, workers of the previous release insert instances
    # without this column, and raw bulk inserts name only the columns they know.
    terminating = models.BooleanField(
        default=False, db_default=False,
        help_text="terminate(rollback=True) was asked: the next replay runs the undos, then terminates it.",
    )
    # Something waits for the instance's end on PostgreSQL (``shared.instance_watch``): its end is notified
    # then alone. A notification costs every ending transaction PostgreSQL's lock on the notification
    # queue, held through its commit, so ends notified whether or not anything waited committed one at a
    # time. db_default as well, as for terminating.
    watched = models.BooleanField(
        default=False, db_default=False,
        help_text="A caller waits for its result or streams its progress: its end is notified (PostgreSQL).",
    )
    waiting_reason = models.TextField(
        null=True, blank=True,
        help_text="Why a waiting instance cannot run yet, when its steps do not say (its workflow is not registered).",
    )
    # The code version the instance was created under: the workflow class's ``version``, else the
    # VERSION setting; "" when neither says. db_default as well, as for terminating: a worker of the
    # previous release inserts instances without it.
    version = models.CharField(
        max_length=100, blank=True, default="", db_default="",
        help_text="The code version it was created under: its workflow's version attribute, else the VERSION "
                  "setting; empty when neither was set.",
    )

    # The instance's own retention, chosen at create (Cloudflare's successRetention and errorRetention);
    # null: RETENTION_DAYS. Workers of the previous release insert instances without these columns
    # during a rolling deploy, and raw bulk inserts name only the columns they know: a nullable column
    # is NULL there by the database's own default. No db_default=None: it says the same, and makes
    # SQLite copy the whole table to add each column instead of an ALTER TABLE ADD COLUMN.
    success_retention = models.DurationField(
        null=True, blank=True, default=None,
        help_text="How long the instance is kept once complete; null: the RETENTION_DAYS setting.",
    )
    error_retention = models.DurationField(
        null=True, blank=True, default=None,
        help_text="How long the instance is kept once errored or terminated; null: the RETENTION_DAYS "
                  "setting.",
    )
    purge_at = models.DateTimeField(
        null=True, blank=True, default=None,
        help_text="When the finished instance is deleted, by its own retention for how it ended (set as it "
                  "ends); null: RETENTION_DAYS after its end.",
    )

    # A child workflow's link to the instance that started it (``step.child``). Not a database foreign key:
    # retention deletes a finished parent by itself, and its children keep the id it had. Nullable, so a
    # previous release's worker inserts instances without it; the policy is not, and has db_default too.
    parent = models.ForeignKey(
        "self", null=True, blank=True, default=None, on_delete=models.DO_NOTHING, db_constraint=False,
        db_index=False, related_name="children", help_text="The instance whose step.child() started this one.",
    )
    parent_step = models.CharField(
        max_length=300, null=True, blank=True, default=None,
        help_text="The key of the parent's step that started this child.",
    )
    on_parent_end = models.CharField(
        max_length=16, choices=ParentEndPolicy.choices, default=ParentEndPolicy.TERMINATE,
        db_default=ParentEndPolicy.TERMINATE,
        help_text="What the parent's terminate or restart does to this child while it runs.",
    )

    # The instance's own deadline (``timeout`` on its class, or ``create(timeout=...)``), fixed when it is
    # created so that a deploy changing the class moves no running instance's; its timeout is kept too, for
    # a restart, which measures it again from then (``django_workflows.shared.deadlines``). Nullable, as the
    # retention columns are, for a previous release's worker that inserts instances without them.
    timeout = models.DurationField(
        null=True, blank=True, default=None,
        help_text="How long the instance may take before it ends errored with WorkflowTimeoutError; null: no "
                  "deadline.",
    )
    deadline = models.DateTimeField(
        null=True, blank=True, default=None,
        help_text="When the instance ends errored with WorkflowTimeoutError if it has not ended: its creation "
                  "(or last restart) plus its timeout.",
    )

    # The links of a family of instances (``step.continue_as_new``): the instance it continues, and the one
    # that continues it, written in the transaction that ends it. Not database foreign keys, as for parent:
    # retention deletes each member of a family by itself.
    predecessor = models.ForeignKey(
        "self", null=True, blank=True, default=None, on_delete=models.DO_NOTHING, db_constraint=False,
        db_index=False, related_name="+", help_text="The instance that continued as new as this one.",
    )
    successor = models.ForeignKey(
        "self", null=True, blank=True, default=None, on_delete=models.DO_NOTHING, db_constraint=False,
        db_index=False, related_name="+", help_text="The instance this one continued as new as.",
    )

    # The row the instance is about (``create(subject=order)``): any model, by content type and primary
    # key as text, so a model whose key is a UUID or a string is bound the same way. PROTECT: a content
    # type is removed (remove_stale_contenttypes) only once nothing refers to it, never with instances.
    subject_type = models.ForeignKey(
        "contenttypes.ContentType", null=True, blank=True, default=None, on_delete=models.PROTECT,
        db_index=False, related_name="+", help_text="The model of the row the instance is about.",
    )
    subject_id = models.CharField(
        max_length=255, null=True, blank=True, default=None,
        help_text="The primary key of the row the instance is about, as text.",
    )
    subject = GenericForeignKey("subject_type", "subject_id")

    # Where and in what order it runs (django_workflows.shared.routing), and what its workflow's keyed limits
    # count it with (django_workflows.shared.limits). db_default as well, as for terminating: a worker of the
    # previous release inserts instances without them. turn_at is left NULL by such a worker (it has
    # no constant default): the claim then orders that instance by nothing but its delivery.
    queue = models.CharField(max_length=64, default="default", db_default="default",
                             help_text="The queue its replays are routed to: only workers serving it run it.")
    priority = models.PositiveSmallIntegerField(
        default=0, db_default=0, help_text="0 to 9: a queued instance of higher priority starts first.")
    turn_at = models.DateTimeField(
        null=True, blank=True, default=None,
        help_text="Its place among the queued instances of its queue: its creation brought forward by "
                  "PRIORITY_AGING_SECONDS per point of priority.")
    limit_key = models.CharField(
        max_length=255, blank=True, default="", db_default="",
        help_text="What its workflow's keyed concurrency and rate limits count it by (a customer, a "
                  "tenant); empty when they are not keyed.")

    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    epoch = models.PositiveBigIntegerField(
        default=0, help_text="Fencing token: bumped by every lease taken and every terminate or restart."
    )
    crash_count = models.PositiveIntegerField(
        default=0, help_text="Replays in a row that died holding the lease (a dead worker) without progress: "
                             "no step finished, no step body ran on under a renewed lease."
    )
    progressed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the replay holding the lease last renewed it from inside a step body: a step that "
                  "runs for minutes is progress, and its worker's death is not counted toward poison.",
    )
    # What the instance has cost, over its life (restarts included), added by each replay as it ends.
    # db_default as well, as for terminating: a previous release's worker inserts instances without them.
    cpu_ms = models.FloatField(
        default=0.0, db_default=0.0,
        help_text="Milliseconds of CPU time its replays used: run() and the step bodies, in every thread "
                  "the engine ran them in; waiting does not count.",
    )
    step_wall_ms = models.FloatField(
        default=0.0, db_default=0.0,
        help_text="Milliseconds its step attempts took, end to end (waits on I/O included; sleeps and "
                  "waits for events not).",
    )

    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    objects = InstanceQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("send_event", "Can send events to instances (approve, reject, webhooks by hand)")]
        constraints = [
            # An id is unique within its workflow. The id leads, in PostgreSQL's pattern operator class,
            # so that this one index also serves the admin's search by an id's beginning (LIKE 'abc%',
            # whatever the database's collation; the class has "=" too, for the lookups by workflow and
            # id); other databases ignore operator classes. Django makes such a constraint a unique index.
            models.UniqueConstraint(fields=["instance_id", "workflow_name"], name="dw_instance_unique_by_id",
                                    opclasses=["varchar_pattern_ops", "varchar_pattern_ops"]),
            models.CheckConstraint(
                condition=Q(status__in=InstanceStatus.values), name="dw_instance_status_valid"
            ),
            # One scheduled instance per workflow and debounce key: two triggers racing on PostgreSQL
            # cannot both insert one; the second waits for the first's commit, then joins its instance.
            models.UniqueConstraint(fields=["workflow_name", "debounce_key"], name="dw_instance_debounce",
                                    condition=Q(status=InstanceStatus.SCHEDULED)),
        ]
        indexes = [
            # The status leads, although the condition fixes it, so that SQLite's planner, which has
            # no statistics until ANALYZE, picks this index over dw_instance_by_age for the
            # wake-up queries (status = 'waiting' ... ORDER BY wake_at) instead of sorting every row.
            models.Index(
                fields=["status", "wake_at"], name="dw_instance_wake", condition=Q(status=InstanceStatus.WAITING)
            ),
            # The same for the instances that start later: the wake-up loop claims each kind by its own.
            models.Index(fields=["status", "wake_at"], name="dw_instance_scheduled",
                         condition=Q(status=InstanceStatus.SCHEDULED)),
            # And for the queued instances a concurrency limit holds back, whose wake time is their
            # deadline (store.leases); no other queued instance has a wake time.
            models.Index(fields=["status", "wake_at"], name="dw_instance_held",
                         condition=Q(status=InstanceStatus.QUEUED, wake_at__isnull=False)),
            # A workflow's instances by status, oldest first: the admin's lists, and for a workflow with a
            # concurrency limit, the claim's count of the instances holding a slot or queued before
            # the one it takes, and the hand-on's oldest queued instances.
            models.Index(fields=["workflow_name", "status", "created_at"], name="dw_instance_by_age"),
            # A workflow's starts, most recent first: the claim's check of its rate limit.
            models.Index(fields=["workflow_name", "started_at"], name="dw_instance_starts"),
            # The same two per limit key, for keyed limits: the instances of one (workflow, key) by
            # status in their turn (the claim's count of those holding a slot or queued ahead, the
            # hand-on's next ones; a concurrency limit without a key counts its workflow's instances by
            # their key "" here too), and its starts (the claim's check of a keyed rate limit).
            models.Index(fields=["workflow_name", "limit_key", "status", "turn_at"], name="dw_instance_key_turns"),
            # Partial on the instances that have a key, the only ones a keyed rate limit counts (a key is
            # never ""): an instance without one, of most workflows, writes nothing here. The check says
            # NOT (limit_key = '') itself, for SQLite, which matches a partial index's condition only with
            # the query's own terms, never through its bound parameters.
            models.Index(fields=["workflow_name", "limit_key", "started_at"], name="dw_instance_keyed_starts",
                         condition=~Q(limit_key="")),
            # A queue's queued instances of a higher priority than one claimed, in their turn: the
            # claim's look for one to start instead. Partial: only queued instances are looked for.
            models.Index(fields=["status", "queue", "priority", "turn_at"], name="dw_instance_queue_turns",
                         condition=Q(status=InstanceStatus.QUEUED)),
            # The admin's filter by version: the versions a workflow's instances were created under, and
            # its instances of one of them.
            models.Index(fields=["workflow_name", "version"], name="dw_instance_version"),
            # Every list of instances, newest first (the model's ordering: the admin's list, the API's,
            # the CLI's), read backwards a page at a time instead of sorting the whole table; filtered
            # by status or workflow, it still finds a page of the common ones within a few pages.
            models.Index(fields=["created_at", "id"], name="dw_instance_recent"),
            models.Index(fields=["status", "updated_at"], name="dw_instance_status_updated"),
            # A parent's children (its terminate and restart reach them; the admin lists them). Partial:
            # most instances have no parent, and the index holds only those that do.
            models.Index(fields=["parent"], name="dw_instance_parent", condition=Q(parent__isnull=False)),
            # Retention reads a batch of due instances at a time, in two reads that this index serves
            # alike: those whose own time has passed (status IN (...) AND purge_at < now AND ended_at IS
            # NOT NULL) and those without one that ended before the RETENTION_DAYS cutoff (status IN
            # (...) AND purge_at IS NULL AND ended_at < cutoff). Each finds exactly its rows and stops
            # after the batch: an instance kept longer than RETENTION_DAYS by its own retention is never
            # read again and again on the way. Partial on the instances that ended, which are the only
            # ones retention reads: an instance's INSERT and every change of status before its end
            # (running, sleeping, waiting) write nothing here. Not "status IN (...)": SQLite cannot
            # match that with the query's bound parameters, while both reads say something of
            # ended_at that implies the condition (a purge time is set only with an end time).
            models.Index(fields=["status", "purge_at", "ended_at"], name="dw_instance_purge",
                         condition=Q(ended_at__isnull=False)),
            # An object's instances (for_subject, its admin page's inline, ?subject= in the API). Partial:
            # most instances are about no row.
            models.Index(fields=["subject_type", "subject_id"], name="dw_instance_subject",
                         condition=Q(subject_type__isnull=False)),
            models.Index(fields=["lease_expires_at"], name="dw_instance_leased",
                         condition=Q(status__in=(InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE))),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name}/{self.instance_id}"


class StepQuerySet(models.QuerySet):
    def journal_of(self, instance: Instance) -> Self:
        """An instance's journal, in the order its steps were written."""
        return self.filter(instance_id=instance.pk).order_by("id")

    def began_at(self, instance: Instance, key: str) -> datetime | None:
        """When the step ``key`` of ``instance`` began, or None if it has no such step (one query)."""
        return self.filter(instance_id=instance.pk, key=key).values_list("started_at", flat=True).first()

    def progress_of(self, instance: Instance) -> dict[str, dict[str, int]]:
        """How many of an instance's steps of each name are in each status: ``{name: {status: count}}``,
        in one query."""
        progress: dict[str, dict[str, int]] = {}
        # Markers are not steps, and may share a name with one.
        rows = (self.filter(instance_id=instance.pk).exclude(kind__in=MARKER_KINDS)
                .values("name", "status").annotate(n=Count("id")))
        for row in rows.order_by():
            progress.setdefault(row["name"], {})[row["status"]] = row["n"]
        return progress


# ``waiting_for__holds_any_of=[...]``: InstanceQuerySet.waiting_for_any's lookup.
Instance._meta.get_field("waiting_for").register_lookup(HoldsAnyOf)


class Step(models.Model):
    """One journal row: the durable outcome of one step of one instance."""

    # The unique constraint's index leads with the instance: it serves the journal's reads and the cascade,
    # and an index of the foreign key's own would be one more B-tree written at every step's commit.
    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="steps", db_index=False)
    key = models.CharField(max_length=300, help_text="The name and its occurrence in the replay: 'charge-1'.")
    name = models.CharField(max_length=256)
    kind = models.CharField(max_length=16, choices=StepKind.choices)
    status = models.CharField(max_length=16, choices=StepStatus.choices)
    attempts = models.JSONField(
        default=list, blank=True, help_text="[{attempt, start, end, success, cpu_ms, wall_ms, error}]"
    )
    config = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    settled_in = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="An async run()'s round in which the outcome reached run(): steps awaited together share "
                  "one, and a replay hands them back in the same rounds.",
    )

    objects = StepQuerySet.as_manager()

    @property
    def is_sensitive(self) -> bool:
        """Whether the step's config says its output is sensitive: journaled, never shown."""
        return isinstance(self.config, dict) and self.config.get("sensitive") == "output"

    class Meta:
        ordering = ["instance", "id"]
        constraints = [models.UniqueConstraint(fields=["instance", "key"], name="dw_step_unique_key")]
        # An instance's step.progress markers, latest first, however long its journal (store.progress).
        indexes = [models.Index(fields=["instance", "id"], name="dw_step_progress",
                                condition=Q(kind=StepKind.PROGRESS))]

    def __str__(self) -> str:
        return f"{self.instance_id}:{self.key}"


class Event(models.Model):
    """One event in an instance's inbox, kept until a ``wait_for_event`` consumes it."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=100)
    payload = models.JSONField(null=True, blank=True)
    received_at = models.DateTimeField()
    sender = models.CharField(max_length=255, blank=True, default="", help_text="Who sent it, for the audit.")
    consumed_by = models.OneToOneField(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="event"
    )
    consumed_at = models.DateTimeField(null=True, blank=True)
    # No longer written (deliveries are rows of Delivery since 0020), but kept for one release: web servers
    # still on the previous release store events with it during a rolling deploy, and refuse a signed
    # delivery they see twice by its unique index. A later release drops it.
    delivery = models.CharField(
        max_length=64, null=True, blank=True, unique=True, editable=False,
        help_text="For a signed webhook, a digest of its signature: the same delivery is stored once.",
    )

    objects = models.Manager.from_queryset(EventQuerySet)()

    class Meta:
        ordering = ["received_at", "id"]
        indexes = [
            models.Index(
                fields=["instance", "type", "received_at"],
                name="dw_event_inbox",
                condition=Q(consumed_by__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} for {self.instance_id}"


# The tables beside the journal and the inbox: imported here, where Django looks for the app's models.
from django_workflows.foundations.side_tables import Delivery, InstanceTag, Schedule, WorkerHeartbeat  # noqa: E402

__all__ = ["ACTIVE_STATUSES", "FINISHED_STATUSES", "MARKER_KINDS", "Delivery", "Event", "Instance",
           "InstanceStatus", "InstanceTag", "ParentEndPolicy", "Schedule", "Step", "StepKind", "StepStatus",
           "WorkerHeartbeat"]
