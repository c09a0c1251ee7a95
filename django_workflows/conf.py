"""The ``DJANGO_WORKFLOWS`` settings, read lazily through one object.

    from django_workflows.conf import workflow_settings
    workflow_settings.STEP_LIMIT

Nothing is read at import time; the cache is dropped whenever Django's
``setting_changed`` fires, so ``override_settings`` works in tests.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

MIB = 1024 * 1024

DEFAULTS: dict[str, Any] = {
    # Dotted path of the executor class that runs replays.
    "EXECUTOR": "django_workflows.executors.inline.InlineExecutor",
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
    # Bytes of a step result, once encoded as JSON.
    "MAX_STEP_RESULT_SIZE": MIB,
    # Bytes of an event payload, once encoded as JSON.
    "MAX_EVENT_PAYLOAD_SIZE": MIB,
    # Bytes of an instance's params, once encoded as JSON.
    "MAX_PARAMS_SIZE": MIB,
    # Seconds a replay holds an instance's lease before another worker may take it over.
    "LEASE_SECONDS": 300,
}

# The most a workflow class may raise its own step limit to.
HARD_STEP_LIMIT = 25_000

IMPORT_STRINGS = {"EXECUTOR"}


class WorkflowSettings:
    def __init__(self):
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        return getattr(settings, "DJANGO_WORKFLOWS", None) or {}

    def unknown_keys(self) -> list[str]:
        return sorted(set(self.user_settings) - set(DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid django_workflows setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    def import_string(self, name: str):
        if name not in IMPORT_STRINGS:
            raise AttributeError(f"{name!r} is not a dotted-path setting")
        return import_string(getattr(self, name))

    def reload(self) -> None:
        self._cache.clear()
        from django_workflows import executors

        executors.reset()


workflow_settings = WorkflowSettings()


def _reload(*, setting, **kwargs):
    if setting == "DJANGO_WORKFLOWS":
        workflow_settings.reload()


setting_changed.connect(_reload)
