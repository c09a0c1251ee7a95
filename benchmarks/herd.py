"""Part 8, the thundering herd, through TWO ``workflows_worker --workers 2`` commands (two machines' worth
of workers sharing one database), for one database and broker (``benchmarks.settings`` picks which).

    python -m benchmarks.herd --out result.json --work-dir DIR --name NAME [--quick] [--count N]

``count`` bench-napper instances (10,000; 1,000 with --quick) asleep for a day, bulk-inserted as part 7
inserts them, are all given the same wake time, two seconds ahead (one UPDATE), while both commands run:
their wake-up loops share the due instances (SKIP LOCKED on PostgreSQL) and their clusters the replays.
Measured per run:

- seconds from the wake time until the last instance completed;
- timer lateness, p50 and p99: the time journaled by the step after the sleep (``time.time()``) minus
  the wake time;
- replays per instance: each lease taken bumps the instance's epoch by one, and the sleepers were
  inserted at epoch 1, so a completed instance at epoch 2 was replayed exactly once; any higher epoch
  is a second replay (a duplicate that took the lease again, a lease taken over), and is counted;
- SQL statements of both commands and all their processes (``benchmarks/querylog.py``), per instance,
  and their CPU time per instance, and that of PostgreSQL's backends serving the benchmark's database.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max

from benchmarks import querylog
from benchmarks.cluster import (
    Worker,
    clean,
    count_done,
    insert_sleepers,
    py_spy,
    stop_py_spy,
    throughput,
    wait_until,
)
from benchmarks.common import (
    backend_cpu,
    backend_cpu_delta,
    cpu_delta,
    cpu_seconds,
    log,
    machine_busy,
    machine_ticks,
    percentile,
    summary,
    write_json,
)
from benchmarks import compat  # noqa: E402
clock = compat.clock()
from django_workflows.models import Instance, Step, StepKind, WorkerHeartbeat

# Seconds between the UPDATE that sets the wake time and the wake time itself: the UPDATE of 10,000
# rows is not part of the herd, and the wake-up loops sleep until that moment as they would in use.
LEAD = 2.0


def herd(workers: list[Worker], count: int) -> dict:
    first, last = insert_sleepers(count)
    cpu_before = {w.pid: cpu_seconds(w.pid) for w in workers}
    time.sleep(1.0)  # the query logs' writers dump every half second
    q_before = [querylog.snapshot(w.query_dir) for w in workers]
    ticks = machine_ticks()
    backends = backend_cpu(settings.DATABASES["default"]["NAME"])
    wake = clock.now().replace(microsecond=0) + timedelta(seconds=LEAD + 1)
    with transaction.atomic():
        Instance.objects.filter(pk__gte=first, pk__lte=last).update(wake_at=wake)
        Step.objects.filter(instance_id__gte=first, instance_id__lte=last, kind=StepKind.SLEEP).update(wake_at=wake)
    wait_until(lambda: count_done("bench-napper") >= count, 900, 0.2, f"{count} due instances to finish")
    busy = machine_busy(ticks, machine_ticks())
    backends = backend_cpu_delta(backends, backend_cpu(settings.DATABASES["default"]["NAME"]))
    cpu = sum(cpu_delta(cpu_before[w.pid], cpu_seconds(w.pid)) for w in workers)
    finished = Instance.objects.filter(workflow_name="bench-napper")
    statuses = dict(finished.values_list("status").annotate(n=Count("id")).values_list("status", "n"))
    assert statuses == {"complete": count}, statuses
    epochs = dict(finished.values_list("epoch").annotate(n=Count("id")).values_list("epoch", "n"))
    last_end = finished.aggregate(last=Max("ended_at"))["last"]
    stamp = wake.timestamp()
    lateness = [output - stamp for output in finished.values_list("output", flat=True)]
    time.sleep(1.0)
    statements = sum(sum(querylog.difference(before, querylog.snapshot(w.query_dir)).values())
                     for before, w in zip(q_before, workers))
    seconds = (last_end - wake).total_seconds()
    return {"seconds": seconds, "rate": count / seconds, "count": count,
            "lateness_p50_ms": percentile(lateness, 0.5) * 1000, "lateness_p99_ms": percentile(lateness, 0.99) * 1000,
            "replayed_twice": sum(n for epoch, n in epochs.items() if epoch > 2),
            "not_replayed": sum(n for epoch, n in epochs.items() if epoch < 2),
            "epochs": {str(k): v for k, v in sorted(epochs.items())},
            "statements_per_instance": statements / count, "cpu_ms_per_instance": cpu / count * 1000,
            "backend_cpu_ms_per_instance": backends / count * 1000,
            "machine_busy": busy}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--profile-dir", default="")
    args = parser.parse_args()
    count = args.count or (1000 if args.quick else 10_000)
    runs = args.runs or (1 if args.quick else 3)
    result: dict = {"backend": connection.vendor, "broker": "redis" if "redis" in settings.Q_CLUSTER else "orm",
                    "quick": args.quick, "commands": 2, "workers_per_command": 2}
    if result["broker"] == "redis":
        import redis

        redis.Redis(**settings.Q_CLUSTER["redis"]).flushdb()
    clean()
    WorkerHeartbeat.objects.all().delete()
    workers = []
    profiles = []
    try:
        for n in (1, 2):
            workers.append(Worker(Path(args.work_dir), f"{args.name}-{n}").start())
        throughput(40)  # warm up both clusters' processes and their connections
        log(f"{args.name}: 8. the herd, {runs} run(s) of {count:,} instances due at once, two worker commands")
        if args.profile_dir:
            profiles = [py_spy(w, Path(args.profile_dir) / f"{args.name}-herd-{n}.txt")
                        for n, w in enumerate(workers, 1)]
        done = []
        for n in range(runs):
            done.append(herd(workers, count))
            r = done[-1]
            log(f"  run {n + 1}: all resumed in {r['seconds']:.1f} s ({r['rate']:.0f}/s); lateness p50 "
                f"{r['lateness_p50_ms']:.0f} ms p99 {r['lateness_p99_ms']:.0f} ms; replayed twice "
                f"{r['replayed_twice']}; {r['statements_per_instance']:.1f} statements and "
                f"{r['cpu_ms_per_instance']:.2f} ms CPU an instance (PostgreSQL's backends "
                f"{r['backend_cpu_ms_per_instance']:.2f} ms); machine {r['machine_busy']:.0%} busy")
        for profile in profiles:
            stop_py_spy(profile)
        result["herd"] = {key: summary([r[key] for r in done]) for key in (
            "seconds", "rate", "lateness_p50_ms", "lateness_p99_ms", "replayed_twice", "statements_per_instance",
            "cpu_ms_per_instance", "backend_cpu_ms_per_instance", "machine_busy")}
        result["herd"]["count"] = count
        result["herd"]["runs"] = done
        clean()
    finally:
        for worker in workers:
            worker.stop()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
