"""The tables beside an instance's journal and inbox: what its inbox was delivered (``Delivery``), its tags
(``InstanceTag``), and the workers' own rows: their heartbeats and the cron schedules' slots. The models
module imports them, so they are models of the app like the others."""

from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """What a running ``workflows_worker`` last said about itself, for the health check."""

    worker_id = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    cluster_restarts = models.PositiveIntegerField(default=0)
    wakeups = models.PositiveBigIntegerField(default=0, help_text="Instances woken by this worker's timers.")
    redispatched = models.PositiveBigIntegerField(default=0, help_text="Replays re-enqueued by the sweeper.")
    probe_sent_at = models.DateTimeField(null=True, blank=True)
    probe_answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.worker_id


class Schedule(models.Model):
    """Where one cron schedule of a workflow class stands: the oldest slot no worker has dealt with yet.

    A worker that finds ``next_slot`` due locks the row, creates the slots' instances and moves
    ``next_slot`` on, in one transaction: workers on any number of machines deal with each slot once, and
    an idle worker asks nothing until the next slot it knows of comes due. Rows are made by the first
    worker that runs with the schedule declared; one whose schedule is no longer declared is left alone."""

    workflow_name = models.CharField(max_length=255)
    key = models.CharField(max_length=32,
                           help_text="The expression's and time zone's hash, as in its instance ids.")
    cron = models.CharField(max_length=255)
    timezone = models.CharField(max_length=64)
    next_slot = models.DateTimeField(
        help_text="The oldest slot not yet created (or skipped by the catch-up policy).")
    last_slot = models.DateTimeField(null=True, blank=True,
                                     help_text="The latest slot an instance was created for.")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workflow_name", "key"], name="dw_schedule_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name}: {self.cron} ({self.timezone})"


class Delivery(models.Model):
    """A delivery the inbox has received: a signed webhook's signature, or an idempotency key of one channel
    on one instance. Apart from the inbox, so that a restart, which forgets the events it takes back,
    still knows what it was sent (``store.inbox``)."""

    key = models.CharField(max_length=64, unique=True, editable=False,
                           help_text="A digest of the signature, or of the channel, instance and key.")
    instance = models.ForeignKey("django_workflows.Instance", on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.BigIntegerField(help_text="The event it stored; a restart may have deleted it since.")
    type = models.CharField(max_length=100)
    payload_digest = models.CharField(max_length=64, help_text="A digest of the payload as canonical JSON.")
    received_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"delivery of {self.type} for {self.instance_id}"


class InstanceTag(models.Model):
    """One tag of an instance (``django_workflows.foundations.tag_rules``): a row per key, so that a filter on a tag is an
    index lookup on (key, value) whatever the number of instances."""

    # The unique constraint's index leads with the instance: the foreign key needs none of its own.
    instance = models.ForeignKey("django_workflows.Instance", on_delete=models.CASCADE, related_name="tags",
                                 db_index=False)
    key = models.CharField(max_length=64)
    value = models.CharField(max_length=255)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["instance", "key"], name="dw_tag_one_per_key")]
        # The instance last, so a filter reads the ids it needs from the index alone.
        indexes = [models.Index(fields=["key", "value", "instance"], name="dw_tag_lookup")]

    def __str__(self) -> str:
        return f"{self.key}={self.value}"
