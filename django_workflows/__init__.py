"""Durable execution for Django, modelled on Cloudflare Workflows.

Importing this package does not import models: the names that need the app
registry (``workflows``) are resolved lazily on first access.
"""

from django_workflows.definition import WorkflowEntrypoint, WorkflowEvent, WorkflowStepEvent
from django_workflows.errors import (
    DuplicateDelivery,
    EventRefused,
    InstanceAlreadyExists,
    InstanceNotFound,
    InvalidEvent,
    InvalidTransition,
    NonDeterminismError,
    NonRetryableError,
    PoisonInstance,
    StepInTransaction,
    StepLimitExceeded,
    WorkflowConfigError,
    WorkflowError,
    WorkflowNotFound,
    WorkflowTimeoutError,
)

__version__ = "0.1.0"

__all__ = [
    "DuplicateDelivery",
    "EventRefused",
    "InstanceAlreadyExists",
    "InstanceNotFound",
    "InvalidEvent",
    "InvalidTransition",
    "NonDeterminismError",
    "StepInTransaction",
    "NonRetryableError",
    "PoisonInstance",
    "StepLimitExceeded",
    "WorkflowConfigError",
    "WorkflowEntrypoint",
    "WorkflowError",
    "WorkflowEvent",
    "WorkflowStepEvent",
    "WorkflowNotFound",
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
    raise AttributeError(f"module 'django_workflows' has no attribute {name!r}")
