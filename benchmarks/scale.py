"""``python -m benchmarks --scale`` (``make bench SCALE=1``): the request paths over a month of a busy site.

On PostgreSQL only (``bench_scale``, created by the driver, migrated, dropped at the end unless
``--keep``): ``benchmarks.scale_load`` bulk-loads 1,000,000 instances, 10,000,000 journal rows (one
instance with 10,000 steps) and 1,000,000 events; then each page, endpoint and loop below is timed over
``--repeat`` requests (the admin's and the API's through Django's test client, in this process, as a
logged-in superuser), and the main queries of each are explained (``EXPLAIN``) to show which indexes
they use. The goals: every page and endpoint p99 at most 300 ms, and no sequential scan of the
instance or step tables on any of these paths. ``benchmarks/SCALE.md`` gets the figures, each with its
goal and whether it was met, and the plans' key lines. Last, an idle ``workflows_worker`` runs on the
million (``benchmarks.scale_idle``), against the goal of the small database's idle worker.

``SCALE_INSTANCES``, ``SCALE_STEPS`` and ``SCALE_EVENTS`` (or ``--instances`` ...) load less, on a
machine where the full load takes too long; the report says what was loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.common import log

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    parser.add_argument("--instances", type=int, default=int(os.environ.get("SCALE_INSTANCES", 1_000_000)))
    parser.add_argument("--steps", type=int, default=int(os.environ.get("SCALE_STEPS", 10_000_000)))
    parser.add_argument("--events", type=int, default=int(os.environ.get("SCALE_EVENTS", 1_000_000)))
    parser.add_argument("--repeat", type=int, default=20, help="requests timed for each path")
    parser.add_argument("--reuse", action="store_true", help="measure what the database holds, loading nothing")
    parser.add_argument("--no-idle", action="store_true", help="leave out the idle worker (which writes to the load)")
    parser.add_argument("--out", default=str(HERE / "SCALE.md"))
    args = parser.parse_args()

    import django

    django.setup()
    from django.db import connection

    from benchmarks import scale_idle, scale_load, scale_paths, scale_report

    if connection.vendor != "postgresql":
        raise SystemExit("the scale benchmark runs on PostgreSQL only")
    connection.ensure_connection()
    raw = connection.connection
    if args.reuse:
        loaded = scale_load.describe(raw)
        log(f"== reusing what the database holds: {loaded['tables']}")
    else:
        log(f"== loading {args.instances:,} instances, {args.steps:,} steps, {args.events:,} events")
        began = time.monotonic()
        raw.autocommit = True
        loaded = scale_load.load(raw, args.instances, args.steps, args.events)
        loaded["seconds"] = round(time.monotonic() - began, 1)
        log(f"== loaded in {loaded['seconds']} s")
    results = scale_paths.measure(loaded, args.repeat)
    # Last: it writes to the load (benchmarks/scale_idle.py says what), so a --reuse after it measures that.
    idle = None if args.no_idle else scale_idle.measure()
    text = scale_report.render(loaded, results, scale_paths.GOAL_MS, idle)
    Path(args.out).write_text(text)
    print(text)
    return 0 if all(row["met"] for row in results) and (idle is None or idle["met"]) else 1


if __name__ == "__main__":
    sys.exit(main())
