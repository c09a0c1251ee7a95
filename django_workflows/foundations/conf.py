"""The ``DJANGO_WORKFLOWS`` settings, read lazily through one object.

    from django_workflows.foundations.conf import workflow_settings
    workflow_settings.STEP_LIMIT

Nothing is read at import time; the cache is dropped whenever Django's
``setting_changed`` fires, so ``override_settings`` works in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

MIB = 1024 * 1024

DEFAULTS: dict[str, Any] = {
    # Dotted path of the executor class that runs replays.
    "EXECUTOR": "django_workflows.executors.q2.DjangoQExecutor",
    # Keyword arguments for the executor class.
    "EXECUTOR_OPTIONS": {},
    # Merged under every step's own config (Cloudflare's defaults).
    "DEFAULT_STEP_CONFIG": {
        "retries": {"limit": 5, "delay": "10 seconds", "backoff": "exponential"},
        "timeout": "10 minutes",
    },
    # Steps (do and wait_for_event; sleeps do not count) per instance, unless
    # the workflow class sets ``step_limit`` (at most HARD_STEP_LIMIT).
    "STEP_LIMIT": 10_000,
    # CPU time one replay of an instance may use (its thread, and the step bodies it ran in others),
    # unless the workflow class sets ``cpu_time_limit`` (at most MAX_CPU_TIME_LIMIT). A duration as
    # durations.parse_duration reads it: milliseconds, or "N unit(s)". Waiting does not count.
    "CPU_TIME_LIMIT": "30 seconds",
    # The version of the code deployed (a release tag, a commit), recorded on each instance created,
    # unless its workflow class sets its own ``version``; None records none. Read it from the
    # environment in settings.py: os.environ.get("RELEASE").
    "VERSION": None,
    # Bytes of a step result or an output, once encoded as JSON: the most that may be stored at all
    # (a larger value fails its step). Values over LARGE_VALUE_THRESHOLD go to file storage, so this
    # may be raised well past 1 MiB.
    "MAX_STEP_RESULT_SIZE": MIB,
    # Bytes of an event payload, once encoded as JSON: the most that may be sent at all.
    "MAX_EVENT_PAYLOAD_SIZE": MIB,
    # Bytes of JSON over which a step result, an output or an event payload is written to file storage,
    # the journal keeping a reference (its name, size and SHA-256): see django_workflows.shared.large_values.
    "LARGE_VALUE_THRESHOLD": 256 * 1024,
    # The alias in Django's STORAGES that large values are written to.
    "LARGE_VALUE_STORAGE": "default",
    # Bytes of an instance's params, once encoded as JSON.
    "MAX_PARAMS_SIZE": MIB,
    # Events an instance's inbox may hold unconsumed; one more is refused (the API's 429 inbox_full).
    "MAX_PENDING_EVENTS": 1000,
    # Of those, how many one sender (Event.sender: "api:alice", "webhook:stripe@10.0.0.1") may have sent,
    # and how many may be of one type. Python code that names no user is bound by MAX_PENDING_EVENTS
    # only. Approvals, signed webhooks and the types an instance waits for are refused only by their
    # own sender's quota, never because others filled the inbox.
    "MAX_PENDING_EVENTS_PER_SENDER": 100,
    "MAX_PENDING_EVENTS_PER_TYPE": 500,
    # Seconds a replay's lease lasts unless renewed; a running replay renews it every third of that.
    # After a worker dies, its instances wait this long before another worker takes them over.
    "LEASE_SECONDS": 60,
    # Replays in a row that end with their lease expired (the worker died) before the instance
    # is parked as errored instead of being delivered again.
    "POISON_LIMIT": 3,
    # Seconds; the wake-up loop never sleeps longer than this between looks at the next wake time,
    # unless the database tells it of new wake times (PostgreSQL's NOTIFY, SQLite's log file).
    "WAKE_INTERVAL": 1.0,
    # Seconds an idle wake-up loop, or the ORM broker of django_workflows.executors.broker, relies on the
    # database telling it of changes before it looks anyway.
    "IDLE_RECHECK_SECONDS": 30.0,
    # Instances the wake-up loop claims per query.
    "WAKE_BATCH": 500,
    # Replays one django-q2 task may carry when many instances become runnable at once (timers due
    # together, create_batch, the sweeper): fewer tasks to enqueue, deliver and acknowledge. Each
    # replay in a task is its own (one failing leaves the others be); 1 gives every replay a task.
    "REPLAY_BATCH": 20,
    # Threads such a task runs its replays on, each with a connection of its own, on a database that
    # takes concurrent writers (not SQLite): a replay mostly waits for its commits, or for what its steps
    # call (a payment provider, a model), so 4 even where the cores are fewer. None: sized to the cores,
    # two replays in flight per core shared among the executor's processes on the machine.
    "REPLAY_THREADS": 4,
    # Seconds between sweeps for expired leases and lost replay tasks.
    "SWEEP_INTERVAL": 5.0,
    # Seconds of waiting worth one point of priority: an instance's turn is its creation brought forward
    # by this per point (django_workflows.shared.routing), so a low priority never starves behind high ones.
    "PRIORITY_AGING_SECONDS": 60.0,
    # Queues beyond 'default' and those workflow classes name (queue = "heavy") that create(queue=...)
    # may route an instance to; workflows_worker --queues picks the ones a worker serves.
    "QUEUES": [],
    # Seconds an instance may stay queued before the sweeper enqueues its replay again.
    "REDISPATCH_SECONDS": 60,
    # Seconds without a heartbeat before the health check calls a worker dead.
    "HEARTBEAT_STALE_SECONDS": 30,
    # Days a finished (complete, errored, terminated) instance is kept; None keeps them for ever.
    "RETENTION_DAYS": 30,
    # Instances deleted per batch by the worker's retention sweep.
    "RETENTION_BATCH": 500,
    # Dotted paths of DRF authentication classes for the API; None: session and token (when
    # rest_framework.authtoken is installed). Basic authentication is left out on purpose: see docs/guide/api.md.
    "API_AUTHENTICATION_CLASSES": None,
    # Whether anyone may read the API's OpenAPI schema; by default it needs view_instance.
    "API_SCHEMA_PUBLIC": False,
    # Dotted paths of DRF permission classes for the API.
    "API_PERMISSION_CLASSES": ["django_workflows.api.permissions.WorkflowModelPermissions"],
    # Whether each workflow's own permissions (django_workflows.view:<name>, steer:<name>,
    # send_event:<name>) are needed beside the Instance model's: see django_workflows.shared.workflow_access.
    "WORKFLOW_PERMISSIONS": False,
    # Dotted path of a callable (user, action) -> Q | None: the instances a user may view, steer or send
    # events to, as a filter on Instance; None narrows nothing. See django_workflows.shared.workflow_access.
    "INSTANCE_ACCESS": None,
    # Instances per page in the API's instance list.
    "API_PAGE_SIZE": 50,
    # {workflow name: secret} for signed webhooks (HMAC-SHA256 of "<timestamp>.<raw body>").
    "WEBHOOK_SECRETS": {},
    # Seconds a webhook's signed timestamp may differ from now (replay protection).
    "WEBHOOK_TOLERANCE_SECONDS": 300,
    # Seconds a probe task may go unanswered, with no replay finishing, before the worker
    # command restarts its django-q2 cluster as wedged.
    "WEDGE_SECONDS": 120,
    # OpenTelemetry spans and metrics (django_workflows.shared.telemetry): None, on if opentelemetry-api is
    # installed; True, on, and an error (MissingExtra) if it is not; False, off.
    "OPENTELEMETRY": None,
    # Dotted path of the class that writes values JSON has no type for (Decimal, datetime, a model
    # instance...) into the journal and reads them back; see docs/guide/typed-values.md.
    "SERIALIZER": "django_workflows.typed_values.TaggedSerializer",
}

# The most a workflow class may raise its own step limit to.
HARD_STEP_LIMIT = 25_000

# The most CPU time a replay may be allowed, by the setting or a workflow class (Cloudflare's 5 minutes).
MAX_CPU_TIME_LIMIT = timedelta(minutes=5)

IMPORT_STRINGS = {"EXECUTOR", "INSTANCE_ACCESS", "SERIALIZER"}


class WorkflowSettings:
    def __init__(self):
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "DJANGO_WORKFLOWS", None) or {}

    def unknown_keys(self) -> list[str]:
        return sorted(set(self.user_settings) - set(DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        # Called only when the setting is not an attribute yet: its value is then kept as one, so that the
        # next read is a plain attribute lookup. Through this method every read would first build and
        # drop an AttributeError, which costs more than a journaled step's other settings reads together.
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid django_workflows setting: {name!r}")
        value = self.__dict__[name] = self.user_settings.get(name, DEFAULTS[name])
        return value

    def import_string(self, name: str):
        if name not in IMPORT_STRINGS:
            raise AttributeError(f"{name!r} is not a dotted-path setting")
        return import_string(getattr(self, name))

    def import_strings(self, name: str) -> list:
        """The classes a list-of-dotted-paths setting names, imported once (until the setting changes),
        not on every request that reads them."""
        key = f"{name} imported"
        if key not in self._cache:
            self._cache[key] = [import_string(path) for path in getattr(self, name)]
        return self._cache[key]

    def serializer(self) -> Any:
        """An instance of the ``SERIALIZER`` class, made once (until the setting changes)."""
        serializer = self._cache.get("SERIALIZER made")
        if serializer is None:
            serializer = self._cache["SERIALIZER made"] = self.import_string("SERIALIZER")()
        return serializer

    def derived(self, key: str, make: Callable[[], Any]) -> Any:
        """A value worked out from the settings (a parsed duration), made once until they change."""
        key = f"{key} derived"
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def reload(self) -> None:
        for name in DEFAULTS:
            self.__dict__.pop(name, None)
        self._cache.clear()


workflow_settings = WorkflowSettings()


def _reload(*, setting, **kwargs):
    if setting == "DJANGO_WORKFLOWS":
        workflow_settings.reload()


setting_changed.connect(_reload)
