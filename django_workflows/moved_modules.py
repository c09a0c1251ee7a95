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
    "django_workflows.schedules": "django_workflows.shared.cron",
    "django_workflows.admin.approvals": "django_workflows.admin.decisions",
    # The surfaces, the handle, the read models and the foundations moved into folders of their own, and
    # django-q2's brokers into executors/ (0.3.0).
    "django_workflows.access": "django_workflows.shared.workflow_access",
    "django_workflows.admin.base": "django_workflows.admin.page_base",
    "django_workflows.admin.inbox": "django_workflows.admin.inbox_discard",
    "django_workflows.admin.steering": "django_workflows.admin.steering_actions",
    "django_workflows.admin.workflows": "django_workflows.admin.workflow_pages",
    "django_workflows.approvals": "django_workflows.client.approvals",
    "django_workflows.audit": "django_workflows.shared.audit",
    "django_workflows.awaiting": "django_workflows.client.awaiting",
    "django_workflows.broker": "django_workflows.executors.broker",
    "django_workflows.bulk_steering": "django_workflows.surfaces.bulk_steering",
    "django_workflows.changes": "django_workflows.shared.changes",
    "django_workflows.checks": "django_workflows.surfaces.checks",
    "django_workflows.cli": "django_workflows.surfaces.cli",
    "django_workflows.clock": "django_workflows.shared.clock",
    "django_workflows.cluster": "django_workflows.surfaces.cluster",
    "django_workflows.conf": "django_workflows.foundations.conf",
    "django_workflows.control_flow": "django_workflows.foundations.control_flow",
    "django_workflows.counts": "django_workflows.shared.counts",
    "django_workflows.cron": "django_workflows.shared.cron",
    "django_workflows.deadlines": "django_workflows.shared.deadlines",
    "django_workflows.declared_events": "django_workflows.shared.declared_events",
    "django_workflows.declared_types": "django_workflows.shared.declared_types",
    "django_workflows.definition": "django_workflows.shared.definition",
    "django_workflows.describe": "django_workflows.reading.describe",
    "django_workflows.drawing": "django_workflows.reading.drawing",
    "django_workflows.drawing.attempts": "django_workflows.reading.drawing.attempts",
    "django_workflows.drawing.diagram": "django_workflows.reading.drawing.diagram",
    "django_workflows.drawing.layout": "django_workflows.reading.drawing.layout",
    "django_workflows.drawing.svg": "django_workflows.reading.drawing.svg",
    "django_workflows.drawing.time_axis": "django_workflows.reading.drawing.time_axis",
    "django_workflows.drawing.timeline": "django_workflows.reading.drawing.timeline",
    "django_workflows.durations": "django_workflows.shared.durations",
    "django_workflows.engine.stored_values": "django_workflows.engine.read_back",
    "django_workflows.error_journal": "django_workflows.shared.error_journal",
    "django_workflows.event_rules": "django_workflows.shared.event_rules",
    "django_workflows.families": "django_workflows.shared.families",
    "django_workflows.inbox_queries": "django_workflows.foundations.inbox_queries",
    "django_workflows.instance_queries": "django_workflows.foundations.instance_queries",
    "django_workflows.instance_retention": "django_workflows.shared.instance_retention",
    "django_workflows.instance_watch": "django_workflows.shared.instance_watch",
    "django_workflows.instances": "django_workflows.client.instances",
    "django_workflows.large_values": "django_workflows.shared.large_values",
    "django_workflows.lifecycle": "django_workflows.shared.lifecycle",
    "django_workflows.limits": "django_workflows.shared.limits",
    "django_workflows.lookups": "django_workflows.foundations.lookups",
    "django_workflows.new_instances": "django_workflows.client.new_instances",
    "django_workflows.options": "django_workflows.shared.options",
    "django_workflows.outline": "django_workflows.reading.outline",
    "django_workflows.outline.nodes": "django_workflows.reading.outline.nodes",
    "django_workflows.outline.reader": "django_workflows.reading.outline.reader",
    "django_workflows.outline.steps": "django_workflows.reading.outline.steps",
    "django_workflows.processes": "django_workflows.shared.processes",
    "django_workflows.queue_broker": "django_workflows.executors.queue_broker",
    "django_workflows.redis_queues": "django_workflows.executors.redis_queues",
    "django_workflows.routing": "django_workflows.shared.routing",
    "django_workflows.rows": "django_workflows.shared.rows",
    "django_workflows.sending": "django_workflows.client.sending",
    "django_workflows.serialization": "django_workflows.shared.serialization",
    "django_workflows.side_tables": "django_workflows.foundations.side_tables",
    "django_workflows.starts": "django_workflows.client.starts",
    "django_workflows.statuses": "django_workflows.foundations.statuses",
    "django_workflows.subjects": "django_workflows.foundations.subjects",
    "django_workflows.tags": "django_workflows.foundations.tag_rules",
    "django_workflows.telemetry": "django_workflows.shared.telemetry",
    "django_workflows.transitions": "django_workflows.shared.transitions",
    "django_workflows.validation": "django_workflows.foundations.validation",
    "django_workflows.webhook_secrets": "django_workflows.shared.webhook_secrets",
    "django_workflows.worker": "django_workflows.surfaces.worker",
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


def current(path: str) -> str:
    """Today's dotted path of ``path``, a module or a name in one ("package.module.Class"), which may name a
    module by its old path: what a setting names compares with today's path through this."""
    moved = True
    while moved:
        moved = False
        for old, new in MOVED_MODULES.items():
            if path == old or path.startswith(old + "."):
                path, moved = new + path[len(old):], True
                break
    return path


def install() -> None:
    # First on the path: a moved package's submodules, which the ordinary finder would also find under the
    # package's old name, are the same module objects by either name.
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
