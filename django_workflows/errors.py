"""Every error the package raises, under one root, ``WorkflowError``.

Errors carry the workflow, instance and step they concern, and survive
pickling (``__reduce__``) so they can cross process boundaries intact.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class WorkflowError(Exception):
    """The root of every error raised by django_workflows."""

    def __init__(self, message: str, **context):
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls, message, context):
    return cls(message, **context)


class NonRetryableError(Exception):
    """Raise from a step to fail it at once, without the remaining retries.

    Kept outside ``WorkflowError`` on purpose: users raise and subclass it
    the way they would a built-in exception, with any arguments.
    """


class WorkflowTimeoutError(WorkflowError):
    """A ``wait_for_event`` (or a step attempt) ran past its timeout."""


class StepTimeoutError(WorkflowTimeoutError):
    """One attempt of ``step.do`` ran past the step's ``timeout``."""


class WorkflowConfigError(WorkflowError, ImproperlyConfigured):
    """A workflow or step is configured wrongly: fix the code, not the data."""


class InvalidStepInput(WorkflowError, ValueError):
    """A step was called with an argument it cannot accept (a bad name, duration, type...)."""


class StepResultError(WorkflowError):
    """A step returned a value that cannot be journaled (not JSON, or too large)."""


class NonDeterminismError(WorkflowError):
    """The replay met a journaled step with a different kind: ``run()`` is not deterministic."""


class StepInTransaction(WorkflowError):
    """A step was called inside a ``transaction.atomic()`` block that ``run()`` opened."""


class StepLimitExceeded(WorkflowError):
    """The instance reached its workflow's step limit."""


class WorkflowNotFound(WorkflowError, LookupError):
    """No workflow with that name is registered."""


class InstanceNotFound(WorkflowError, LookupError):
    """No instance with that id exists for that workflow."""


class InstanceAlreadyExists(WorkflowError):
    """An instance with that id already exists for that workflow."""


class InvalidTransition(WorkflowError):
    """The instance's status does not allow the requested change."""


class InvalidEvent(WorkflowError, ValueError):
    """An event's type or payload is not acceptable."""


class EventRefused(WorkflowError, PermissionError):
    """The workflow's declared events do not let this sender send this type through this channel."""


class DuplicateDelivery(WorkflowError):
    """A signed webhook delivery that was already received: the same signature, posted again."""


class IdempotencyKeyReused(WorkflowError):
    """An idempotency key already stored another event (another type or payload) on the instance."""


class InboxFull(WorkflowError):
    """The instance's inbox holds ``MAX_PENDING_EVENTS`` unconsumed events: no more are stored."""


class InvalidParams(WorkflowError, ValueError):
    """An instance id or params are not acceptable."""


class PoisonInstance(WorkflowError):
    """Replays of the instance kept dying with their worker; it was parked instead of delivered again."""
