"""Counting the SQL statements of a process and of every process it forks, by wrapping.

Every connection gets an ``execute_wrapper`` that counts its statements by kind (the workflow
tables, django-q2's ORM queue, the rest of django-q2, other). A daemon thread of each process
writes its counts to ``<dir>/<pid>.json`` every half second when they changed; a reader adds up the differences
between two snapshots. Counts start at zero in each process (a forked child does not inherit its
parent's). Statements sent by the database driver itself (BEGIN, COMMIT, SAVEPOINT from Django's
transaction management on PostgreSQL) do not pass through ``execute`` and are not counted: the
driver reads pg_stat_database's commit count for those.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

from django.db.backends.signals import connection_created

KINDS = ("workflows", "django_q_queue", "django_q_other", "other")

_state = {"pid": None, "counts": Counter(), "dir": None, "timing": None}
_lock = threading.Lock()


def classify(sql: str) -> str:
    if "django_workflows_" in sql:
        return "workflows"
    if "django_q_ormq" in sql:
        return "django_q_queue"
    if "django_q_" in sql:
        return "django_q_other"
    return "other"


def _ensure_process() -> Counter:
    pid = os.getpid()
    if _state["pid"] != pid:
        with _lock:
            if _state["pid"] != pid:
                _state["pid"] = pid
                _state["counts"] = Counter()
                _state["timing"] = {} if os.environ.get("BENCH_QUERY_TIMING") else None
                threading.Thread(target=_dump_forever, args=(pid,), daemon=True, name="querylog").start()
    return _state["counts"]


def _dump(pid: int) -> None:
    path = Path(_state["dir"]) / f"{pid}.json"
    tmp = path.with_suffix(".tmp")
    data = {"pid": pid, "t": time.time(), "counts": dict(_state["counts"])}
    if _state["timing"] is not None:
        data["timing"] = {sql: list(v) for sql, v in list(_state["timing"].items())}
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _dump_forever(pid: int) -> None:
    written = None
    while _state["pid"] == pid:
        total = sum(_state["counts"].values())
        if total != written:  # an idle process writes nothing
            try:
                _dump(pid)
                written = total
            except OSError:
                pass
        time.sleep(0.5)


def _wrapper(execute, sql, params, many, context):
    _ensure_process()[classify(sql)] += 1
    timing = _state["timing"]
    if timing is None:
        return execute(sql, params, many, context)
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        # BENCH_QUERY_TIMING=1: [count, seconds] per statement text (its first 150 characters).
        entry = timing.setdefault(sql[:150], [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - started


def _on_connection(sender, connection, **kwargs):
    if _wrapper not in connection.execute_wrappers:
        connection.execute_wrappers.append(_wrapper)


def install(directory: str) -> None:
    Path(directory).mkdir(parents=True, exist_ok=True)
    _state["dir"] = directory
    connection_created.connect(_on_connection, dispatch_uid="benchmarks.querylog")


def snapshot(directory) -> dict[int, dict]:
    """``{pid: counts}`` as last written by each process."""
    result = {}
    for path in Path(directory).glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        result[data["pid"]] = data["counts"]
    return result


def difference(before: dict, after: dict) -> Counter:
    total: Counter = Counter()
    for pid, counts in after.items():
        previous = before.get(pid, {})
        for kind, value in counts.items():
            total[kind] += value - previous.get(kind, 0)
    return total
