"""The processes of this machine as Linux's /proc shows them: one reading of ``/proc/<pid>/stat``.

The lease holders (is a holder's process gone?), the worker (the processes of its django-q2 cluster),
the system tests and the benchmarks all read the same file; its second field, the command name, is in
parentheses and may itself hold spaces and parentheses, so it is split once here, after the last ")".
Where /proc is missing (not Linux) there are no processes to read: callers then judge nothing.
"""

from __future__ import annotations

import os

# Indexes into ``stat_fields``: the fields of /proc/<pid>/stat after the command name (the third field,
# the state, is index 0), as proc(5) numbers them less three.
STATE = 0
PARENT = 1
SESSION = 3
USER_TICKS = 11  # utime; then stime, cutime and cstime
START_TICKS = 19  # the start time, in clock ticks since boot

# States of a process that has exited: only its exit code is left for its parent.
EXITED = ("Z", "X")


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name; raises ``OSError`` (``FileNotFoundError``
    once the process is gone and reaped) when it cannot be read."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return text.rsplit(")", 1)[1].split()


def process_ids() -> list[int]:
    """The ids of every process of this machine (of this PID namespace); empty without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(entry) for entry in entries if entry.isdigit()]


def process_table() -> dict[int, list[str]]:
    """``{pid: stat_fields(pid)}`` of every process that could be read (one that ends meanwhile is left out)."""
    table = {}
    for pid in process_ids():
        try:
            table[pid] = stat_fields(pid)
        except OSError:
            continue
    return table


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid``."""
    return [child for child, fields in process_table().items() if int(fields[PARENT]) == pid]


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it, from one reading of the parent ids."""
    children: dict[int, list[int]] = {}
    for child, fields in process_table().items():
        children.setdefault(int(fields[PARENT]), []).append(child)
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree
