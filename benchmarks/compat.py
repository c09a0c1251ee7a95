"""The package's internals the benchmarks reach, found wherever the measured commit keeps them.

``make bench BASE=<commit>`` (``benchmarks/ab.py``) runs this benchmark code, HEAD's, against an older
package: the same driver measuring two packages is the fair comparison, and an old commit's own
benchmarks may differ or predate a figure. The public API (``create()``, ``send_event``) has not
moved; the internals the benchmarks time directly have, so each is looked up here under its present
module first, then under its earlier ones (before the engine became one folder, a42c43d, the replay
and the retry policy were top-level modules; before b971958 there was no ``processes`` module; at 7fc20ba the engine was one module).
"""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace
from typing import Any


def _first(name: str, *modules: str) -> Any:
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"{name} is in none of {', '.join(modules)}")


def module(*paths: str) -> Any:
    """The first of ``paths`` that imports: a module the measured commit keeps under one of them (before
    the package's folders by layer, ``django_workflows.shared.clock`` was ``django_workflows.clock``)."""
    for path in paths:
        try:
            return importlib.import_module(path)
        except ImportError:
            continue
    raise ImportError(f"none of {', '.join(paths)} imports")


def clock() -> Any:
    return module("django_workflows.shared.clock", "django_workflows.clock")


def replay(*args, **kwargs):
    return _first("replay", "django_workflows.engine.replay", "django_workflows.replay",
                  "django_workflows.engine")(*args, **kwargs)


def default_policy():
    return _first("default_policy", "django_workflows.engine.policy", "django_workflows.policy",
                  "django_workflows.engine")()


def load_journal(pk: int):
    return _first("load", "django_workflows.store.journal_entries", "django_workflows.store.journal",
                  "django_workflows.journal")(pk)


def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    # The command name is in parentheses and may hold spaces: split after the last ")".
    return text.rsplit(")", 1)[1].split()


def _process_ids() -> list[int]:
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for member in _process_ids():
        try:
            parents.setdefault(int(_stat_fields(member)[1]), []).append(member)
        except OSError:
            continue
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(parents.get(current, []))
    return tree


def processes() -> Any:
    """``django_workflows.shared.processes``, or the same reading of /proc for a package from before it."""
    try:
        return module("django_workflows.shared.processes", "django_workflows.processes")
    except ImportError:
        return SimpleNamespace(stat_fields=_stat_fields, process_ids=_process_ids, descendants=_descendants,
                               USER_TICKS=11)
