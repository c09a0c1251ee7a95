"""Modules that moved, still importable by their old dotted paths.

Dotted paths outlive a release: django-q2's queue holds the path of the task each queued replay runs, a
journaled error names its class's module (``error_journal``), and a project's settings or imports may
name a module of this package. Each path below resolves to the module's new home, with a
``DeprecationWarning`` that names it; the old paths go in a later release."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED_MODULES = {
    # The engine's parts moved into django_workflows.engine (0.2.0).
    **{f"django_workflows.{name}": f"django_workflows.engine.{name}" for name in (
        "replay", "replay_costs", "replay_endings", "replay_outcome", "journal_cursor", "step_host", "step",
        "do_steps", "step_functions", "waits", "patches", "concurrent_steps", "atomic_steps", "rollbacks",
        "async_run", "timeouts", "policy", "verification")},
    "django_workflows.children": "django_workflows.engine.child_steps",
    "django_workflows.tasks": "django_workflows.engine.replay_tasks",
    "django_workflows.schedules": "django_workflows.cron",
    "django_workflows.admin.approvals": "django_workflows.admin.decisions",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and hands back the module at its new one (the same module object, so a class
    imported either way is the same class)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED_MODULES[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path goes in a later "
                      "release).", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass  # the module at the new path has run already


def install() -> None:
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
