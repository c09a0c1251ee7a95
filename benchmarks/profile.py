"""Profiles of the in-process hot paths (pyinstrument), for PROFILES.md.

    python -m benchmarks --profile [--only sqlite,postgres]    # runs this for each in-process database

writes ``<out>/<backend>-three.txt`` (200 sequential 3-step workflows on the inline executor) and
``<out>/<backend>-steps.txt`` (one replay of 1,000 steps), and prints how the time splits between the
database (an execute wrapper times every statement) and Python.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.db import connection  # noqa: E402

from benchmarks.inproc import clean, create_unrun  # noqa: E402
from django_workflows import workflows  # noqa: E402
from django_workflows.engine.replay import replay  # noqa: E402


class StatementTimer:
    def __init__(self):
        self.times = defaultdict(lambda: [0, 0.0])

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            entry = self.times[sql[:90]]
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    def total(self) -> float:
        return sum(v[1] for v in self.times.values())

    def lines(self, per: int) -> list[str]:
        return [f"  {seconds / per * 1e6:8.0f} us per unit ({count / per:g} statements)  {sql}"
                for sql, (count, seconds) in sorted(self.times.items(), key=lambda kv: -kv[1][1])]


def measure(label: str, fn, per: int, out: Path) -> str:
    from pyinstrument import Profiler

    fn()  # warm up
    timer = StatementTimer()
    with connection.execute_wrapper(timer):
        started = time.perf_counter()
        fn()
        wall = time.perf_counter() - started
    profiler = Profiler(interval=0.0002)
    profiler.start()
    fn()
    profiler.stop()
    out.write_text(profiler.output_text(unicode=True, color=False, show_all=False))
    sql = timer.total()
    text = [f"{label}: {wall / per * 1e6:.0f} us per unit, of which SQL (execute to return) "
            f"{sql / per * 1e6:.0f} us ({sql / wall:.0%}), Python {(wall - sql) / per * 1e6:.0f} us",
            *timer.lines(per)]
    return "\n".join(text)


def compile_costs() -> str:
    """Microseconds to build and compile (``as_sql``, no database) the ORM statements every replay
    made until the engine wrote them as SQL (``leases.take``, ``journal.load``, ``JournalWriter.release``),
    against running a compiled one: the "before" of PROFILES.md's first finding."""
    import timeit
    from datetime import timedelta

    from django.db.models import Case, DateTimeField, F, PositiveIntegerField, Q, Value, When
    from django.db.models.functions import Coalesce
    from django.db.models.sql import UpdateQuery

    from benchmarks import compat
    clock = compat.clock()
    from django_workflows.models import Instance, InstanceStatus, Step

    _TAKEN_OVER = (InstanceStatus.RUNNING, InstanceStatus.WAITING_FOR_PAUSE)

    def update_sql(queryset, **values):
        query = queryset.query.chain(UpdateQuery)
        query.add_update_values(values)
        return query.get_compiler(connection.alias).as_sql()

    def claim():
        now = clock.now()
        return update_sql(
            Instance.objects.filter(
                Q(status__in=(InstanceStatus.QUEUED, InstanceStatus.WAITING))
                | Q(status__in=_TAKEN_OVER, lease_expires_at__lt=now)
            ).filter(pk=1),
            status=Case(When(status=InstanceStatus.WAITING_FOR_PAUSE, then=Value(InstanceStatus.WAITING_FOR_PAUSE)),
                        default=Value(InstanceStatus.RUNNING)),
            epoch=F("epoch") + 1,
            crash_count=Case(When(status__in=_TAKEN_OVER, then=F("crash_count") + 1), default=F("crash_count"),
                             output_field=PositiveIntegerField()),
            lease_owner="x", lease_expires_at=now + timedelta(seconds=60), wake_at=None,
            started_at=Coalesce("started_at", Value(now, output_field=DateTimeField())), updated_at=now)

    def read():
        return Instance.objects.only("workflow_name", "instance_id", "params", "status", "epoch", "created_at",
                                     "crash_count").filter(pk=1).query.get_compiler(connection.alias).as_sql()

    def load_sql():
        return Step.objects.filter(instance_id=1).values_list(
            "key", "id", "kind", "status", "attempts", "result", "error", "wake_at", "started_at"
        ).query.get_compiler(connection.alias).as_sql()

    def finish():
        now = clock.now()
        return update_sql(Instance.objects.filter(pk=1, epoch=1), lease_owner="", lease_expires_at=None,
                          crash_count=0, updated_at=now, status=InstanceStatus.COMPLETE, output=3, ended_at=now,
                          wake_at=None, waiting_for=None, current_step="")

    lines = [f"{connection.vendor}: building + compiling the fixed statements of a replay (no database):"]
    total = 0.0
    for label, fn in (("claim UPDATE", claim), ("read the instance", read), ("load the journal", load_sql),
                      ("finish UPDATE", finish)):
        fn()
        seconds = timeit.timeit(fn, number=500) / 500
        total += seconds
        lines.append(f"  {seconds * 1e6:6.0f} us  {label}")
    sql, params = read()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        raw = timeit.timeit(lambda: (cursor.execute(sql, params), cursor.fetchall()), number=500) / 500
    lines.append(f"  {total * 1e6:6.0f} us  in all, per replay; running one compiled SELECT by pk: {raw * 1e6:.0f} us")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = connection.vendor
    clean()
    handle = workflows.get("bench-three")

    def three():
        for _ in range(200):
            handle.create()

    def steps():
        replay(create_unrun("bench-steps", {"n": 1000}))

    summary = [
        measure(f"{backend}: 3-step workflow (create + replay, inline)", three, 200, out / f"{backend}-three.txt"),
        measure(f"{backend}: one step of a 1,000-step replay", steps, 1000, out / f"{backend}-steps.txt"),
        compile_costs(),
    ]
    clean()
    text = "\n\n".join(summary)
    (out / f"{backend}-split.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
