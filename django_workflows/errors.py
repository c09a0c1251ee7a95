"""Every error the package raises, under one root, ``WorkflowError``.

Errors carry the workflow, instance and step they concern, and survive
pickling (``__reduce__``) so they can cross process boundaries intact.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class WorkflowError(Exception):
    """The root of every error raised by django_workflows.

    ``code`` and ``http_status`` are what the API answers when the error reaches it: each class
    carries its own, so every surface reports an error the same way.
    """

    code = "invalid"
    http_status = 400

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

    @property
    def public_message(self) -> str:
        """The message for a client of the API or a webhook sender, who may not be the developer: the
        same as ``message`` unless the class says what to leave out."""
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


class MissingExtra(WorkflowConfigError, ImportError):
    """A part of the package needs a library its extra installs (``[q2]``, ``[api]``), and it is missing."""


def require_extra(module: str, extra: str, part: str) -> None:
    """Raise ``MissingExtra`` unless ``module`` can be imported: a part of the package that needs an
    optional library says which extra to install, instead of an ImportError from deep inside."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtra(
            f"{part} needs the {module!r} package, which is not installed: "
            f"pip install 'django-durable-workflows[{extra}]'.",
            module=module, extra=extra,
        )


class InvalidStepInput(WorkflowError, ValueError):
    """A step was called with an argument it cannot accept (a bad name, duration, type...)."""


class StepResultError(WorkflowError):
    """A step returned a value that cannot be journaled (not JSON, or too large)."""


class StoredValueError(WorkflowError):
    """A large value kept in file storage cannot be read back as it was written: its file is missing,
    changed, or its storage cannot be reached. The message names the instance, the step and the file."""

    code, http_status = "stored_file_unreadable", 410


class StoredValueUnreadable(WorkflowError):
    """A journaled value names a class or model this code no longer has (renamed, removed, uninstalled)."""

    code = "stored_value_unreadable"


class StoredObjectMissing(StoredValueUnreadable, LookupError):
    """A journaled model instance (stored as its model and primary key) whose row has since been deleted;
    ``model`` and ``pk`` say which."""

    code = "stored_object_missing"


class NonDeterminismError(WorkflowError):
    """The replay met a journaled step with a different kind: ``run()`` is not deterministic."""


class StepInTransaction(WorkflowError):
    """A step was called inside a ``transaction.atomic()`` block that ``run()`` opened."""


class StepLimitExceeded(WorkflowError):
    """The instance reached its workflow's step limit."""


class CpuTimeLimitExceeded(WorkflowError):
    """A replay of the instance used more CPU time than its workflow's ``cpu_time_limit``."""


class WorkflowNotFound(WorkflowError, LookupError):
    """No workflow with that name is registered."""

    code, http_status = "workflow_not_found", 404

    @property
    def public_message(self) -> str:
        # The developer's message lists the workflows defined here; a client is not told what exists.
        return f"No workflow named {self.context.get('workflow')!r} is defined here."


class InstanceNotFound(WorkflowError, LookupError):
    """No instance with that id exists for that workflow."""

    code, http_status = "instance_not_found", 404


class InstanceAlreadyExists(WorkflowError):
    """An instance with that id already exists for that workflow."""

    code, http_status = "instance_exists", 409


class InvalidTransition(WorkflowError):
    """The instance's status does not allow the requested change."""

    code, http_status = "transition_not_allowed", 409


class InstanceFailed(WorkflowError):
    """``result()`` of an instance that ended without completing: ``error`` is the instance's own
    (``{name, message}``, as ``status()`` gives it; None for a terminate that recorded none)."""


class InstanceErrored(InstanceFailed):
    """``result()`` of an instance that ended ``errored``."""


class InstanceTerminated(InstanceFailed):
    """What the undos of ``terminate(rollback=True)`` receive as ``error``, and the terminated instance's
    error records, with its rollback's outcome; and ``result()`` of a terminated instance."""


class ResultTimeout(WorkflowError, TimeoutError):
    """``result(timeout=...)`` waited that long and the instance had not ended; ``status`` is where it
    stood. Nothing changed: wait again, or steer it."""


class StepNotFound(WorkflowError, LookupError):
    """A restart from a step the instance's journal does not hold."""

    code, http_status = "step_not_found", 400


class InstanceFinished(InvalidTransition):
    """An event was sent to an instance that has finished and will never wait again."""

    code = "instance_finished"


class InvalidEvent(WorkflowError, ValueError):
    """An event's type or payload is not acceptable."""

    code = "invalid_event"


class InvalidEventType(InvalidEvent):
    """Not an event type, or one the workflow does not declare."""

    code = "invalid_event_type"


class InvalidPayload(InvalidEvent):
    """A payload its event type's declared schema refuses."""

    code = "invalid_payload"


class InvalidIdempotencyKey(InvalidEvent):
    code = "invalid_idempotency_key"


class EventTooLarge(InvalidEvent):
    code, http_status = "payload_too_large", 413


class EventRefused(WorkflowError, PermissionError):
    """The workflow's declared events do not let this sender send this type through this channel."""

    code, http_status = "event_refused", 403


class EventPermissionRequired(EventRefused):
    """The type declares a permission the sender does not hold (or no user was named)."""

    code = "event_permission"


class WebhookOnly(EventRefused):
    """The type is declared webhook-only, and a person sent it."""

    code = "webhook_only"


class NotAWebhook(EventRefused):
    """A signed delivery sent a type not declared as a webhook."""

    code = "not_a_webhook"


class DuplicateDelivery(WorkflowError):
    """A signed webhook delivery that was already received: the same signature, posted again."""

    code, http_status = "duplicate_delivery", 409


class IdempotencyKeyReused(WorkflowError):
    """An idempotency key already stored another event (another type or payload) on the instance."""

    code, http_status = "idempotency_key_reused", 409


class InboxFull(WorkflowError):
    """The instance's inbox holds ``MAX_PENDING_EVENTS`` unconsumed events: no more are stored."""

    code, http_status = "inbox_full", 429


class InvalidFilter(WorkflowError, ValueError):
    """A bulk steering filter (``where``) names no known filter, or gives a value it cannot take."""

    code, http_status = "invalid_filter", 400


class InvalidParams(WorkflowError, ValueError):
    """An instance id or params are not acceptable."""

    code = "invalid_params"


class InvalidInstanceId(InvalidParams):
    code = "invalid_id"


class ParamsTooLarge(InvalidParams):
    code, http_status = "payload_too_large", 413


class InvalidTags(InvalidParams):
    """Tags that are not a mapping of short keys to short strings (``django_workflows.foundations.tag_rules``)."""

    code = "invalid_tags"


class InvalidSubject(InvalidParams):
    """A subject that is not a saved model instance, or a reference to one that names no model."""

    code = "invalid_subject"


class PoisonInstance(WorkflowError):
    """Replays of the instance kept dying with their worker; it was parked instead of delivered again."""
