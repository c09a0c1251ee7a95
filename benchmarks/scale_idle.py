"""The scale benchmark's last measure: an idle ``workflows_worker`` on the loaded million.

A worker is idle when nothing is due: its cost is then the wake-up loop's look at the next wake time,
the sweeper's rounds and the heartbeat, whose statements read indexes whose depth, not the table's
size, sets their cost. To measure that on the million rather than argue it, the load is first made
quiet where it would give the worker work at once (this writes to the database, so it runs after every
other path): the waiting instances' wake times and the running ones' leases move a day ahead, the
queued instances are set aside as paused, and the finished ones' retention is left to a
``RETENTION_DAYS`` of a year. What stays is a million instances in every status and ten million journal
rows. Then ``benchmarks.cluster``'s part 7 runs unchanged: a real ``workflows_worker --workers 2`` with
its statements counted in every process, its CPU read from /proc, PostgreSQL's commits from
pg_stat_database, against the small database's goal (part 7 of ``make bench``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from benchmarks.common import log

CPU_GOAL = 2.0
"""Percent of a core, as part 7 of ``make bench``."""
STATEMENTS_GOAL = 2.0
"""Statements a second, all processes, as part 7 of ``make bench``."""


def quieten() -> dict:
    """Push ahead what a worker would act on at once; the counts of rows changed."""
    from django.db import connection, transaction

    changed = {}
    with transaction.atomic(), connection.cursor() as cursor:
        for what, sql in (
            ("wake times a day ahead",
             "UPDATE django_workflows_instance SET wake_at = wake_at + interval '1 day' "
             "WHERE status = 'waiting' AND wake_at IS NOT NULL"),
            ("leases a day ahead",
             "UPDATE django_workflows_instance SET lease_expires_at = now() + interval '1 day' "
             "WHERE status IN ('running', 'waitingForPause')"),
            ("queued set aside as paused",
             "UPDATE django_workflows_instance SET status = 'paused' WHERE status = 'queued'"),
            ("own retention a year ahead",
             "UPDATE django_workflows_instance SET purge_at = now() + interval '365 days' "
             "WHERE purge_at IS NOT NULL"),
        ):
            cursor.execute(sql)
            changed[what] = cursor.rowcount
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_workflows_instance")
    return changed


def measure(windows: int = 2, seconds: float = 20.0, settle: float = 15.0) -> dict:
    from benchmarks import cluster

    changed = quieten()
    log(f"   idle worker: quietened the load ({', '.join(f'{k}: {v:,}' for k, v in changed.items())})")
    current = json.loads(os.environ.get("BENCH_WORKFLOWS_SETTINGS") or "{}")
    os.environ["BENCH_WORKFLOWS_SETTINGS"] = json.dumps({**current, "RETENTION_DAYS": 365})
    work = Path(tempfile.mkdtemp(prefix="scale-idle-"))
    worker = cluster.Worker(work, "scale-idle").start()
    try:
        result = cluster.idle(worker, windows, seconds, settle)
    finally:
        worker.stop()
        os.environ["BENCH_WORKFLOWS_SETTINGS"] = json.dumps(current) if current else ""
    cpu = result["cpu_percent"]["median"]
    statements = result["queries_per_second"]["median"]
    result.update({
        "changed": changed,
        "met": cpu < CPU_GOAL and statements <= STATEMENTS_GOAL,
        "cpu_goal": CPU_GOAL,
        "statements_goal": STATEMENTS_GOAL,
    })
    log(f"   idle worker: CPU {cpu:.2f}% of a core, {statements:.2f} statements/s")
    return result
