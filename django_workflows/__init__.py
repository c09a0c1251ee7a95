"""Durable execution for Django, modelled on Cloudflare Workflows.

Importing this package does not import models: the names that need the app
registry (``workflows``, ``WorkflowStep``) are resolved lazily on first access.
"""

from django_workflows import moved_modules
from django_workflows.definition import StepContext, WorkflowEntrypoint, WorkflowEvent, WorkflowStepEvent
from django_workflows.error_journal import StepFailed
from django_workflows.errors import (
    CpuTimeLimitExceeded,
    DuplicateDelivery,
    EventPermissionRequired,
    EventRefused,
    EventTooLarge,
    IdempotencyKeyReused,
    InboxFull,
    InstanceAlreadyExists,
    InstanceErrored,
    InstanceFailed,
    InstanceFinished,
    InstanceNotFound,
    InstanceTerminated,
    InvalidEvent,
    InvalidEventType,
    InvalidIdempotencyKey,
    InvalidInstanceId,
    InvalidFilter,
    InvalidParams,
    InvalidPayload,
    InvalidStepInput,
    InvalidSubject,
    InvalidTags,
    InvalidTransition,
    MissingExtra,
    NonDeterminismError,
    NonRetryableError,
    NotAWebhook,
    ParamsTooLarge,
    PoisonInstance,
    ResultTimeout,
    StepInTransaction,
    StepLimitExceeded,
    StepNotFound,
    StepResultError,
    StoredValueError,
    StoredObjectMissing,
    StoredValueUnreadable,
    StepTimeoutError,
    WebhookOnly,
    WorkflowConfigError,
    WorkflowError,
    WorkflowNotFound,
    WorkflowTimeoutError,
)

__version__ = "0.1.0"

# Modules that moved stay importable by their old paths (queued tasks and journals name them).
moved_modules.install()

__all__ = [
    "CpuTimeLimitExceeded",
    "DuplicateDelivery",
    "EventPermissionRequired",
    "EventRefused",
    "EventTooLarge",
    "IdempotencyKeyReused",
    "InboxFull",
    "InstanceAlreadyExists",
    "InstanceErrored",
    "InstanceFailed",
    "InstanceFinished",
    "InstanceNotFound",
    "InstanceTerminated",
    "InvalidEvent",
    "InvalidEventType",
    "InvalidIdempotencyKey",
    "InvalidInstanceId",
    "InvalidFilter",
    "InvalidParams",
    "InvalidPayload",
    "InvalidStepInput",
    "InvalidSubject",
    "InvalidTags",
    "MissingExtra",
    "InvalidTransition",
    "NonDeterminismError",
    "NonRetryableError",
    "NotAWebhook",
    "ParamsTooLarge",
    "PoisonInstance",
    "ResultTimeout",
    "StepFailed",
    "StepInTransaction",
    "StepLimitExceeded",
    "StepNotFound",
    "StepResultError",
    "StoredValueError",
    "StoredObjectMissing",
    "StoredValueUnreadable",
    "StepTimeoutError",
    "WebhookOnly",
    "WorkflowConfigError",
    "WorkflowEntrypoint",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowNotFound",
    "StepContext",
    "WorkflowStep",
    "WorkflowStepEvent",
    "WorkflowTimeoutError",
    "__version__",
    "workflows",
]


def tick() -> None:
    """One round of timers, sweeping and retention: what django-q2's scheduler runs once a minute under a
    plain ``qcluster`` (the schedule ``django_workflows.tick``, installed by ``migrate``)."""
    from django_workflows.store.dispatch import tick as run_tick

    run_tick()


def __getattr__(name: str):
    if name == "workflows":
        from django_workflows.instances import workflows

        return workflows
    if name == "WorkflowStep":
        # Lazily, as workflows: the step API's module imports models.
        from django_workflows.engine.step import WorkflowStep

        return WorkflowStep
    raise AttributeError(f"module 'django_workflows' has no attribute {name!r}")
