"""The statuses of instances and steps, and the kinds of steps: what the tables store, and every surface
shows by the same names (Cloudflare's, for an instance).

Importable without the app registry (the models import them; ``django_workflows.models`` re-exports
them, where they were first defined and where projects import them from).
"""

from __future__ import annotations

from django.db import models


class InstanceStatus(models.TextChoices):
    """Cloudflare's instance statuses (``unknown`` is never stored), and ``scheduled`` before them."""

    SCHEDULED = "scheduled", "Scheduled"
    """Created to start later (``create(start_at=...)``, ``start_in=``, ``debounce=``): nothing runs until
    its wake time, when it is queued."""
    QUEUED = "queued", "Queued"
    """Created (or resumed, or restarted) and waiting for a replay to pick it up."""
    RUNNING = "running", "Running"
    """A replay holds the lease and is running ``run()``."""
    PAUSED = "paused", "Paused"
    """Stopped by ``pause()``; nothing runs until ``resume()``."""
    WAITING_FOR_PAUSE = "waitingForPause", "Waiting for pause"
    """``pause()`` was asked while a replay ran; it stops after its current step."""
    WAITING = "waiting", "Waiting"
    """Sleeping, waiting for an event, or waiting out a retry delay; holds no worker."""
    ERRORED = "errored", "Errored"
    """``run()`` raised; the error and traceback are stored."""
    TERMINATED = "terminated", "Terminated"
    """Stopped for good by ``terminate()``."""
    COMPLETE = "complete", "Complete"
    """``run()`` returned; its return value is the output."""


class ParentEndPolicy(models.TextChoices):
    """What a parent's terminate, terminate-with-rollback or restart does to a child it started."""

    TERMINATE = "terminate", "Terminate"
    """The child goes with its parent: terminated (with rollback, restarted) as the parent is."""
    ABANDON = "abandon", "Abandon"
    """The child runs on by itself."""


FINISHED_STATUSES = (InstanceStatus.ERRORED, InstanceStatus.TERMINATED, InstanceStatus.COMPLETE)
ACTIVE_STATUSES = tuple(status for status in InstanceStatus if status not in FINISHED_STATUSES)
"""Every status but the finished ones: the instance may still run."""


class StepKind(models.TextChoices):
    DO = "do", "step.do"
    SLEEP = "sleep", "step.sleep"
    WAIT = "waitForEvent", "step.wait_for_event"
    PATCH = "patch", "step.patched"
    """A marker, not a step: ``step.patched(change_id)`` was first reached when the journal had nothing
    further, so the instance takes the patched code from there on (``django_workflows.engine.patches``)."""
    TAGS = "tags", "step.set_tags"
    """A marker, not a step: ``step.set_tags(...)`` set these tags, so a replay sets no others
    (``django_workflows.engine.tag_steps``)."""
    PROGRESS = "progress", "step.progress"
    """A marker, not a step: ``step.progress(value)`` reported how far the instance has come, so a
    replay reports it no more (``django_workflows.engine.progress_steps``)."""


MARKER_KINDS = (StepKind.PATCH, StepKind.TAGS, StepKind.PROGRESS)
"""Rows of the journal that are not steps: they take no position among the steps and are never run."""


class StepStatus(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    """Done; ``result`` holds its value (for a wait, the event)."""
    FAILED = "failed", "Failed"
    """Failed for good (retries exhausted, non-retryable, or a wait timed out); ``error`` holds why."""
    RETRYING = "retrying", "Retrying"
    """An attempt failed; the next one is due at ``wake_at``."""
    WAITING = "waiting", "Waiting"
    """A sleep, or a wait for an event, until ``wake_at``."""
