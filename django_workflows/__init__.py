"""Durable execution for Django, modelled on Cloudflare Workflows.

Importing this package does not import models: the names that need the app
registry (``workflows``, ``WorkflowStep``) are resolved lazily on first access.

The modules a project imports by path are those in ``PUBLIC_MODULES``; their paths hold from release to
release. Every other module is internal: it may move or change between releases (one that moved stays
importable by its old path for a release, with a DeprecationWarning: ``moved_modules``).
"""

from django_workflows import moved_modules
from django_workflows.shared.definition import StepContext, WorkflowEntrypoint, WorkflowEvent, WorkflowStepEvent
from django_workflows.shared.error_journal import StepFailed
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

PUBLIC_MODULES = (
    "django_workflows",  # WorkflowEntrypoint, workflows, the errors, tick (django-q2's schedule)
    "django_workflows.errors",
    "django_workflows.signals",
    "django_workflows.testing",
    "django_workflows.cloudflare",
    "django_workflows.async_client",
    "django_workflows.pytest_plugin",
    "django_workflows.webhooks",  # sign(), for a sender of signed webhooks
    "django_workflows.typed_values",  # TaggedSerializer, which SERIALIZER names and a project subclasses
    "django_workflows.models",  # the rows, for a project's own queries
    "django_workflows.admin",  # WorkflowInstancesInline
    "django_workflows.api.urls",
    "django_workflows.executors",  # the executor classes settings name (EXECUTOR), and BaseExecutor
)

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
        from django_workflows.client.instances import workflows

        return workflows
    if name == "WorkflowStep":
        # Lazily, as workflows: the step API's module imports models.
        from django_workflows.engine.step import WorkflowStep

        return WorkflowStep
    raise AttributeError(f"module 'django_workflows' has no attribute {name!r}")
