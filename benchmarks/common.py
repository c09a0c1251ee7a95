"""Helpers shared by the measuring processes: summaries, percentiles, CPU time from /proc."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.compat import processes as _processes

processes = _processes()
descendants = processes.descendants

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def summary(values) -> dict | None:
    """``{median, min, max, n, runs}`` of a list of numbers (None when there are none)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "runs": values}


def percentile(values, fraction: float) -> float:
    """Linear-interpolated percentile (as numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def write_json(path, data) -> None:
    Path(path).write_text(json.dumps(data, indent=2, default=str))


# -- CPU time of a process tree, from /proc ------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    """The process's stat fields, or None once it is gone."""
    try:
        return processes.stat_fields(pid)
    except OSError:
        return None


def roles(pid: int, workers: int = 2) -> dict[int, str]:
    """Names for the processes of a ``workflows_worker``: the command, django-q2's sentinel, and the
    sentinel's children, named from their stacks (``py-spy dump``: pusher, monitor or worker); without
    py-spy, from the order django-q2 spawns them (workers, monitor, pusher), which recycled workers upset."""
    import subprocess

    children: dict[int, list[int]] = {}
    for member in descendants(pid):
        fields = _stat(member)
        if fields:
            children.setdefault(int(fields[1]), []).append(member)
    names = {pid: "command"}
    spy = Path(sys.executable).with_name("py-spy")
    for sentinel in children.get(pid, []):
        names[sentinel] = "sentinel"
        spawned = sorted(children.get(sentinel, []))
        for n, child in enumerate(spawned):
            name = None
            if spy.exists():
                try:
                    stack = subprocess.run([str(spy), "dump", "--pid", str(child), "--nonblocking"],
                                           capture_output=True, text=True, timeout=15).stdout
                except (OSError, subprocess.TimeoutExpired):
                    stack = ""
                for role in ("pusher", "monitor", "worker"):
                    if f" {role} (django_q/" in stack:
                        name = role
                        break
            if name is None:
                name = ("worker" if n < workers else "monitor" if n == workers else
                        "pusher" if n == workers + 1 else "worker")
            if name == "worker":
                name = f"worker {sum(1 for v in names.values() if v.startswith('worker')) + 1}"
            names[child] = name
    return names


def cpu_seconds(pid: int) -> dict[int, float]:
    """``{pid: CPU seconds}`` of ``pid`` and its descendants: utime + stime + cutime + cstime (fields
    14 to 17 of /proc/<pid>/stat), so that a child that exits and is reaped inside the tree (django-q2
    recycles its workers) moves its time into its parent's instead of losing it."""
    result = {}
    for member in descendants(pid):
        fields = _stat(member)
        if fields:
            result[member] = sum(int(v) for v in fields[processes.USER_TICKS:processes.USER_TICKS + 4]) / CLOCK_TICKS
    return result


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the tree spent between two ``cpu_seconds`` readings (a process reaped in between
    took its time into its parent's reading, and out of the tree's total)."""
    return sum(after.values()) - sum(before.values())


def backend_cpu(dbname: str) -> dict[int, float]:
    """``{pid: CPU seconds}`` of the live PostgreSQL backends connected to ``dbname`` (from their
    titles, ``postgres: ... <user> <dbname> <client> ...``). Backends that ended are not there."""
    total = {}
    for pid in processes.process_ids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                title = handle.read().decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres:") and f" {dbname} " in title:
            fields = _stat(pid)
            if fields:
                user, system = fields[processes.USER_TICKS:processes.USER_TICKS + 2]
                total[pid] = (int(user) + int(system)) / CLOCK_TICKS
    return total


def backend_cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the backends spent between two ``backend_cpu`` readings, backend by backend: one
    that ended in between (a worker's connection closed) takes its whole time out of a plain difference
    of sums, which then goes negative; here its time since the first reading is lost instead."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def machine_ticks() -> tuple[int, int]:
    """``(busy, total)`` clock ticks of all cores since boot, from the first line of /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    return total - idle, total


def machine_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The machine's busy fraction (all cores, anyone's processes) between two ``machine_ticks``."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total else 0.0
