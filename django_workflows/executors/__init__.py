"""Executors decide where and when a replay runs; the engine only asks them to enqueue one."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_executor = None
_overrides: list = []


def get_executor():
    """The executor named by the ``EXECUTOR`` setting, built once and reused
    (or the one ``django_workflows.testing`` put in its place)."""
    global _executor
    if _overrides:
        return _overrides[-1]
    if _executor is None:
        with _lock:
            if _executor is None:
                from django_workflows.conf import workflow_settings

                cls = workflow_settings.import_string("EXECUTOR")
                _executor = cls(**workflow_settings.EXECUTOR_OPTIONS)
    return _executor


def reset() -> None:
    """Forget the built executor (settings changed)."""
    global _executor
    with _lock:
        _executor = None


def push_override(executor) -> None:
    """Use ``executor`` instead of the configured one until ``pop_override()``, whatever the settings say."""
    _overrides.append(executor)


def pop_override() -> None:
    _overrides.pop()
