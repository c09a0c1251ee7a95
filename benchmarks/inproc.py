"""Parts 1, 2, 3 and 6, in one process against one database (``benchmarks.settings`` and its
environment pick which), on the inline executor.

    python -m benchmarks.inproc --out result.json [--quick]

1. the limit: single-row INSERT + COMMIT of a journal-shaped row, through the driver alone (sqlite3,
   psycopg) and through the Django connection;
2. the step overhead of a 1,000-step workflow (one replay, timed), and its ratio to (1), per run; and
   through the public API (``create()`` on the inline executor, timed whole), against the driver's;
3. sequential 3-step workflows per second, ours and DBOS Transact's, per run, and the ratio;
6. resume time with 10, 1,000 and 10,000 journaled steps, and the queries a resume makes.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from benchmarks.common import log, summary, write_json  # noqa: E402
from django_workflows import executors, workflows  # noqa: E402
from benchmarks import compat  # noqa: E402
clock = compat.clock()
from django_workflows.models import Event, Instance, InstanceStatus, Step, StepKind, StepStatus  # noqa: E402
from benchmarks.compat import default_policy, replay  # noqa: E402
from benchmarks.compat import load_journal as load  # noqa: E402
from django_workflows.testing import RecordingExecutor  # noqa: E402


def clean() -> None:
    Event.objects.all().delete()
    Step.objects.all().delete()
    Instance.objects.all().delete()


def create_unrun(name: str, params) -> int:
    """Create an instance without running it (its replay is recorded, not run): its pk."""
    recorder = RecordingExecutor()
    executors.push_override(recorder)
    try:
        return workflows.get(name).create(params=params).pk
    finally:
        executors.pop_override()


# -- 1. the limit ---------------------------------------------------------------------------------

class InsertLimit:
    """Plain ``INSERT INTO django_workflows_step ... VALUES (...)`` in autocommit: one row, one commit,
    with the columns and values of a succeeded ``step.do`` journal row (no fence, no RETURNING)."""

    def __init__(self):
        now = clock.now()
        self.instance_pk = Instance.objects.create(
            workflow_name="bench-three", instance_id=f"limit-{time.time_ns()}", status=InstanceStatus.COMPLETE,
            created_at=now, updated_at=now,
        ).pk
        ops = connection.ops
        json_placeholder = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
        columns = ["instance_id", "key", "name", "kind", "status", "attempts", "config", "result", "error",
                   "wake_at", "started_at", "ended_at"]
        placeholders = ["%s"] * 5 + [json_placeholder] * 4 + ["%s"] * 3
        self.sql = (
            f"INSERT INTO {ops.quote_name(Step._meta.db_table)} ({', '.join(ops.quote_name(c) for c in columns)}) "
            f"VALUES ({', '.join(placeholders)})"
        )
        iso = now.isoformat()
        self.attempts = json.dumps([{"attempt": 1, "start": iso, "end": iso, "success": True}])
        self.config = json.dumps(default_policy().as_config())
        self.stamp = ops.adapt_datetimefield_value(now)
        self.run_number = 0

    def rows(self, count: int, prefix: str = "limit") -> list[tuple]:
        """The parameters of ``count`` rows with keys of their own."""
        self.run_number += 1
        return [
            (self.instance_pk, f"{prefix}-{self.run_number}-{n}", "limit", StepKind.DO.value,
             StepStatus.SUCCEEDED.value, self.attempts, self.config, "1", None, None, self.stamp, self.stamp)
            for n in range(count)
        ]

    def run(self, count: int) -> float:
        """Insert ``count`` rows; return rows per second."""
        params = self.rows(count)
        assert connection.get_autocommit()
        with connection.cursor() as cursor:
            started = time.perf_counter()
            for row in params:
                cursor.execute(self.sql, row)
            elapsed = time.perf_counter() - started
        return count / elapsed


class DriverFloor:
    """The same INSERT and COMMIT as (1) through the driver alone (``sqlite3``, ``psycopg``), with no
    Django between: on a connection of its own to the same database, with the same pragmas (WAL and
    the same ``synchronous``) on SQLite, in autocommit on PostgreSQL. The floor a journaled step
    cannot go below; the gap between it and (1) is what Django's cursor costs."""

    def __init__(self, limit: InsertLimit):
        self.limit = limit
        settings = connection.settings_dict
        self.vendor = connection.vendor
        if self.vendor == "sqlite":
            import sqlite3

            self.conn = sqlite3.connect(settings["NAME"], isolation_level=None, timeout=20)
            for pragma in settings["OPTIONS"].get("init_command", "").split(";"):
                if pragma.strip():
                    self.conn.execute(pragma)
            self.sql = limit.sql.replace("%s", "?")
        else:
            import psycopg

            self.conn = psycopg.connect(dbname=settings["NAME"], user=settings["USER"] or None,
                                        password=settings["PASSWORD"] or None, host=settings["HOST"] or None,
                                        port=settings["PORT"] or None, autocommit=True)
            self.sql = limit.sql

    def run(self, count: int) -> float:
        """Insert ``count`` rows; return rows per second."""
        params = self.limit.rows(count, prefix="floor")
        cursor = self.conn.cursor()
        started = time.perf_counter()
        for row in params:
            cursor.execute(self.sql, row)
        elapsed = time.perf_counter() - started
        cursor.close()
        return count / elapsed

    def close(self) -> None:
        self.conn.close()


# -- 2. step overhead -----------------------------------------------------------------------------

def step_overhead(steps: int, workflow: str = "bench-steps") -> float:
    """One replay of a ``steps``-step workflow of trivial steps: microseconds per step."""
    pk = create_unrun(workflow, {"n": steps})
    started = time.perf_counter()
    assert replay(pk)
    elapsed = time.perf_counter() - started
    row = Instance.objects.values("status", "output").get(pk=pk)
    assert row == {"status": "complete", "output": steps}, row
    return elapsed / steps * 1e6


def public_step_overhead(steps: int, workflow: str = "bench-steps") -> float:
    """The same workflow through the public API: ``create()``, which the inline executor runs to the
    end inside it (the instance's insert, the claim, the steps, the finish), timed whole: microseconds
    per step. Beside ``step_overhead`` it shows what a workflow's fixed cost adds per step."""
    started = time.perf_counter()
    handle = workflows.get(workflow).create(params={"n": steps})
    elapsed = time.perf_counter() - started
    row = Instance.objects.values("status", "output").get(pk=handle.pk)
    assert row == {"status": "complete", "output": steps}, row
    return elapsed / steps * 1e6


# -- 3. sequential 3-step workflows, ours and DBOS's ----------------------------------------------

def ours_three(count: int) -> float:
    """``count`` sequential create() of a 3-step workflow, each run to completion by the inline
    executor inside create(): workflows per second."""
    handle = workflows.get("bench-three")
    first = Instance.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    started = time.perf_counter()
    for _ in range(count):
        handle.create()
    elapsed = time.perf_counter() - started
    done = Instance.objects.filter(pk__gt=first, workflow_name="bench-three", status="complete").count()
    assert done == count, (done, count)
    return count / elapsed


class Dbos:
    """The same 3-step workflow in DBOS Transact, on its own system database."""

    def __init__(self, url: str):
        import sqlalchemy
        from dbos import DBOS, DBOSConfig

        if url.startswith("sqlite"):
            # The same durability settings as our SQLite database: WAL, synchronous=NORMAL (DBOS's
            # own connect hook adds BEGIN IMMEDIATE and a busy timeout).
            @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
            def _pragmas(dbapi_connection, record):
                import sqlite3

                if isinstance(dbapi_connection, sqlite3.Connection):
                    dbapi_connection.execute("PRAGMA journal_mode=WAL")
                    dbapi_connection.execute("PRAGMA synchronous=NORMAL")

        config: DBOSConfig = {
            "name": "bench-workflows",
            "system_database_url": url,
            "application_version": "bench-1",
            "executor_id": "bench",
            "log_level": "WARNING",
        }
        DBOS(config=config)

        @DBOS.step()
        def step_a():
            return 1

        @DBOS.step()
        def step_b(a):
            return a + 1

        @DBOS.step()
        def step_c(a, b):
            return a + b

        @DBOS.workflow()
        def three():
            a = step_a()
            b = step_b(a)
            return step_c(a, b)

        self.DBOS = DBOS
        self.workflow = three
        DBOS.launch()
        assert self.workflow() == 3

    def run(self, count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            self.workflow()
        return count / (time.perf_counter() - started)

    def close(self) -> None:
        self.DBOS.destroy(destroy_registry=True)


def dbos_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("dbos")
    except Exception:
        return None


# -- 6. the journal's scale -----------------------------------------------------------------------

def journal_scale(sizes, runs: int) -> dict:
    result = {}
    for size in sizes:
        pk = create_unrun("bench-steps", {"n": size, "sleep": True})
        built = time.perf_counter()
        replay(pk)  # runs the steps, journals them, suspends on the hour's sleep
        built = time.perf_counter() - built
        assert Step.objects.filter(instance_id=pk).count() == size + 1

        def rewind():
            past = clock.now() - timedelta(seconds=1)
            Instance.objects.filter(pk=pk).update(status=InstanceStatus.WAITING, wake_at=past, output=None,
                                                  ended_at=None)
            Step.objects.filter(instance_id=pk, kind=StepKind.SLEEP).update(status=StepStatus.WAITING,
                                                                            wake_at=past, ended_at=None)

        rewind()
        with CaptureQueriesContext(connection) as ctx:
            assert replay(pk)
        statements = [q["sql"] for q in ctx.captured_queries]
        step_table = Step._meta.db_table
        # On PostgreSQL the statement that takes the lease reads the journal too: a WITH ending in a SELECT.
        journal_reads = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH")) and
                         f'FROM "{step_table}"' in s]
        resumes, loads = [], []
        for _ in range(runs):
            rewind()
            started = time.perf_counter()
            assert replay(pk)
            resumes.append((time.perf_counter() - started) * 1000)
            assert Instance.objects.values_list("output", flat=True).get(pk=pk) == size
            started = time.perf_counter()
            entries = load(pk)
            loads.append((time.perf_counter() - started) * 1000)
            assert len(entries) == size + 1
        result[str(size)] = {
            "resume_ms": summary(resumes), "load_ms": summary(loads), "build_s": built,
            "queries": len(statements), "journal_queries": len(journal_reads),
            "statements": [s[:160] for s in statements],
        }
        log(f"  journal {size:>6}: resume {summary(resumes)['median']:.1f} ms, "
            f"{len(statements)} queries ({len(journal_reads)} journal read)")
    return result


# -- the whole ------------------------------------------------------------------------------------

def warm_up() -> tuple[InsertLimit, DriverFloor]:
    """Run each measured path a little first (imports, the connection, the statement caches); return the
    insert limit and the driver's floor, ready to measure."""
    limit = InsertLimit()
    floor = DriverFloor(limit)
    limit.run(50)
    floor.run(50)
    step_overhead(50)
    public_step_overhead(50)
    ours_three(5)
    return limit, floor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dbos-url", default="")
    args = parser.parse_args()
    quick = args.quick
    runs = 1 if quick else 5
    inserts = 300 if quick else 3000
    steps = 1000
    three = 30 if quick else 300
    backend = connection.vendor
    result: dict = {"backend": backend, "quick": quick}
    assert "inline" in executors.get_executor().__class__.__module__, "run with the inline executor"
    clean()

    limit, floor = warm_up()

    log(f"{backend}: 1-2. the driver's and Django's insert, and the step overhead, {runs} run(s)")
    rates, floor_rates, step_us, ratios, public_us, public_ratios = [], [], [], [], [], []
    for n in range(runs):
        floor_rates.append(floor.run(inserts))
        rates.append(limit.run(inserts))
        step_us.append(step_overhead(steps))
        public_us.append(public_step_overhead(steps))
        ratios.append(step_us[-1] / (1e6 / rates[-1]))
        public_ratios.append(public_us[-1] / (1e6 / floor_rates[-1]))
        log(f"  run {n + 1}: driver {1e6 / floor_rates[-1]:.0f} us, Django {1e6 / rates[-1]:.0f} us a row; "
            f"step {step_us[-1]:.0f} us by replay(), {public_us[-1]:.0f} us by create(), "
            f"{public_ratios[-1]:.2f}x the driver's")
    floor.close()
    result["floor"] = {"rate": summary(floor_rates), "us": summary([1e6 / r for r in floor_rates]),
                       "rows": inserts}
    result["limit"] = {"rate": summary(rates), "us": summary([1e6 / r for r in rates]), "rows": inserts}
    result["step"] = {"us": summary(step_us), "ratio": summary(ratios), "steps": steps}
    result["public"] = {"us": summary(public_us), "ratio": summary(public_ratios), "steps": steps}

    # The same steps in the Python SDK's async forms (awaited one by one, and as decorated async step
    # functions), and three at a time side by side (step.all, and asyncio.gather in async run: each
    # group's bodies run in threads of their own, so it measures what running side by side costs).
    log(f"{backend}: 2b. the same 999 steps: async def run, decorated, step.all and gather of three, atomic, "
        f"{runs} run(s)")
    workflows_of = {"async": "bench-steps-async", "decorated": "bench-steps-decorated",
                    "all3": "bench-steps-all", "gather3": "bench-steps-gather", "atomic": "bench-steps-atomic"}
    for name in workflows_of.values():
        step_overhead(51, name)
    forms: dict = {form: [] for form in workflows_of}
    for n in range(runs):
        for form, name in workflows_of.items():
            forms[form].append(step_overhead(999, name))
        log(f"  run {n + 1}: " + ", ".join(f"{form} {values[-1]:.0f} us" for form, values in forms.items())
            + " per step")
    result["step_forms"] = {form: {"us": summary(values)} for form, values in forms.items()}

    log(f"{backend}: 3. sequential 3-step workflows, ours and DBOS, {runs} run(s) of {three}")
    dbos, dbos_error = None, None
    if not args.dbos_url:
        dbos_error = "no DBOS system database was given"
    else:
        try:
            dbos = Dbos(args.dbos_url)
            dbos.run(5)
        except Exception as exc:  # reported as "not measured", with the reason
            dbos_error = f"{type(exc).__name__}: {exc}"
            dbos = None
    ours_rates, dbos_rates, three_ratios = [], [], []
    for n in range(runs):
        # Alternate the order, so drift (others' load) does not favour one side.
        if dbos is not None and n % 2:
            dbos_rates.append(dbos.run(three))
            ours_rates.append(ours_three(three))
        else:
            ours_rates.append(ours_three(three))
            if dbos is not None:
                dbos_rates.append(dbos.run(three))
        if dbos is not None:
            three_ratios.append(ours_rates[-1] / dbos_rates[-1])
        log(f"  run {n + 1}: ours {ours_rates[-1]:.0f}/s" +
            (f", DBOS {dbos_rates[-1]:.0f}/s, ratio {three_ratios[-1]:.2f}" if dbos else f" (DBOS: {dbos_error})"))
    if dbos is not None:
        dbos.close()
    result["three"] = {
        "ours": summary(ours_rates), "dbos": summary(dbos_rates), "ratio": summary(three_ratios),
        "count": three, "dbos_error": dbos_error, "dbos_version": dbos_version(),
        "dbos_url": args.dbos_url.split("@")[-1],
    }

    log(f"{backend}: 6. the journal's scale")
    result["journal"] = journal_scale((10, 1000, 10000), runs)
    clean()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
