"""The table (printed and in REPORT.md), the chart (report.png) and the raw results (results.json)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchmarks import ab_report, history

HERE = Path(__file__).resolve().parent

COLUMNS = [
    ("SQLite", {"inproc": "sqlite", "cluster": "sqlite-orm", "herd": None}),
    ("PostgreSQL", {"inproc": "postgres", "cluster": "postgres-orm", "herd": "postgres-orm-herd"}),
    ("PostgreSQL + Redis broker", {"inproc": None, "cluster": "postgres-redis", "herd": "postgres-redis-herd"}),
]


def _get(data, *path):
    for key in path:
        if data is None:
            return None
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _fmt_number(value: float, digits: int | None = None) -> str:
    if digits is None:
        magnitude = abs(value)
        digits = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2
    return f"{value:,.{digits}f}"


def fmt(stat, unit: str = "", digits: int | None = None) -> str:
    if stat is None:
        return "not measured"
    if isinstance(stat, (int, float)):
        return f"{_fmt_number(stat, digits)}{unit}"
    median = _fmt_number(stat["median"], digits)
    if stat["n"] == 1:
        return f"{median}{unit}"
    return f"{median}{unit} ({_fmt_number(stat['min'], digits)}–{_fmt_number(stat['max'], digits)})"


class Row:
    def __init__(self, part: str, measure: str, kind: str, path: tuple, unit: str = "", goal: str = "",
                 check=None, digits: int | None = None, scale: float = 1.0):
        self.part, self.measure, self.kind, self.path = part, measure, kind, path
        self.unit, self.goal, self.check, self.digits, self.scale = unit, goal, check, digits, scale

    def stat(self, results, config):
        if config is None:
            return "n/a"
        data = _get(results["configs"].get(config), *self.path)
        if data is None or self.scale == 1.0 or isinstance(data, (int, float)):
            return data
        return {**data, **{k: data[k] * self.scale for k in ("median", "min", "max")}}

    def cells(self, results) -> tuple[list[str], str]:
        cells, verdicts = [], []
        for _, configs in COLUMNS:
            config = configs[self.kind]
            stat = self.stat(results, config)
            if stat == "n/a":
                cells.append("n/a")
                continue
            if stat is None:
                reason = results["skipped"].get(config) or results["failed"].get(config)
                if self.path[0] == "three" and self.path[1] in ("dbos", "ratio"):
                    reason = _get(results["configs"].get(config), "three", "dbos_error") or reason
                cells.append("not measured" + (f" ({reason})" if reason and len(reason) < 60 else ""))
                continue
            text = fmt(stat, self.unit, self.digits)
            if self.check is not None:
                value = stat if isinstance(stat, (int, float)) else stat["median"]
                ok = self.check(value)
                verdicts.append(ok)
                text += " ✓" if ok else " ✗"
            cells.append(text)
        if self.check is None or not verdicts:
            met = "" if self.check is None else "not measured"
        elif all(verdicts):
            met = "met"
        elif not any(verdicts):
            met = "missed"
        else:
            met = f"met {sum(verdicts)} of {len(verdicts)}"
        return cells, met


ROWS = [
    Row("1", "INSERT + COMMIT of a journal row, the driver alone (no Django), µs per row", "inproc",
        ("floor", "us")),
    Row("1", "INSERT + COMMIT of a journal row through Django's cursor, rows/s", "inproc", ("limit", "rate")),
    Row("1", "… the same, µs per row", "inproc", ("limit", "us")),
    Row("2", "1,000-step workflow, µs per step (replay(), inline)", "inproc", ("step", "us")),
    Row("2", "… step ÷ Django's INSERT+COMMIT (pair by pair)", "inproc", ("step", "ratio"), "×", "≤ 2×",
        lambda v: v <= 2.0, digits=2),
    Row("2", "1,000-step workflow through create() (public API, inline), µs per step", "inproc",
        ("public", "us")),
    Row("2", "… public step ÷ the driver's INSERT+COMMIT (pair by pair)", "inproc", ("public", "ratio"), "×",
        "≤ 2×", lambda v: v <= 2.0, digits=2),
    Row("2", "… async def run, µs per step (999 steps)", "inproc", ("step_forms", "async", "us")),
    Row("2", "… async step functions (@step.do), µs per step (999 steps)", "inproc",
        ("step_forms", "decorated", "us")),
    Row("2", "… step.all of three side by side, µs per step (999 steps)", "inproc", ("step_forms", "all3", "us")),
    Row("2", "… asyncio.gather of three, µs per step (999 steps)", "inproc", ("step_forms", "gather3", "us")),
    Row("2", "… atomic=True (body and journal row in one transaction), µs per step (999 steps)", "inproc",
        ("step_forms", "atomic", "us")),
    Row("3", "3-step workflows/s, sequential, ours (inline)", "inproc", ("three", "ours")),
    Row("3", "3-step workflows/s, sequential, DBOS Transact", "inproc", ("three", "dbos")),
    Row("3", "… ours ÷ DBOS (pair by pair)", "inproc", ("three", "ratio"), "×", "≥ 5×", lambda v: v >= 5.0,
        digits=2),
    Row("4", "{count} × 3 steps through workflows_worker --workers 2, workflows/s", "cluster",
        ("throughput", "rate"), "", "≥ 300/s", lambda v: v >= 300),
    Row("5", "event → resume, p50", "cluster", ("latency", "event_p50_ms"), " ms", "≤ 150 ms", lambda v: v <= 150),
    Row("5", "event → resume, p99", "cluster", ("latency", "event_p99_ms"), " ms", "≤ 500 ms", lambda v: v <= 500),
    Row("5", "timer lateness, p50", "cluster", ("latency", "timer_p50_ms"), " ms"),
    Row("5", "timer lateness, p99", "cluster", ("latency", "timer_p99_ms"), " ms", "≤ 1,000 ms",
        lambda v: v <= 1000),
    Row("6", "resume with 10 journaled steps", "inproc", ("journal", "10", "resume_ms"), " ms"),
    Row("6", "resume with 1,000 journaled steps", "inproc", ("journal", "1000", "resume_ms"), " ms"),
    Row("6", "resume with 10,000 journaled steps", "inproc", ("journal", "10000", "resume_ms"), " ms",
        "≤ 250 ms", lambda v: v <= 250),
    Row("6", "… queries that read the journal, per resume (10,000)", "inproc",
        ("journal", "10000", "journal_queries"), "", "1", lambda v: v == 1, digits=0),
    Row("6", "… all queries of that resume", "inproc", ("journal", "10000", "queries"), "", digits=0),
    Row("7", "idle with {sleepers} asleep: CPU of the worker and its processes", "cluster",
        ("idle", "cpu_percent"), "% of a core", "< 2%", lambda v: v < 2.0),
    Row("7", "idle: SQL statements/s, all processes (wrapper count)", "cluster",
        ("idle", "queries_per_second"), "/s", "≤ 2/s", lambda v: v <= 2.0),
    Row("7", "… of which the engine (wake-up loop, sweeper, heartbeat)", "cluster",
        ("idle", "by_kind", "workflows"), "/s", "≤ 2/s", lambda v: v <= 2.0),
    Row("7", "… of which django-q2 polling its ORM queue", "cluster", ("idle", "by_kind", "django_q_queue"), "/s"),
    Row("7", "idle: transactions/s (pg_stat_database)", "cluster", ("idle", "commits_per_second"), "/s"),
    Row("7", "{due} due at once: seconds until all resumed", "cluster", ("burst", "seconds"), " s"),
    Row("8", "herd: {herd} due at the same second, two workflows_worker --workers 2: seconds until all resumed",
        "herd", ("herd", "seconds"), " s", "≤ 10 s", lambda v: v <= 10),
    Row("8", "… instances resumed per second (10,000 in 10 s is 1,000/s)", "herd", ("herd", "rate"), "/s",
        "≥ 1,000/s", lambda v: v >= 1000),
    Row("8", "… timer lateness of the herd, p50", "herd", ("herd", "lateness_p50_ms"), " ms"),
    Row("8", "… timer lateness of the herd, p99", "herd", ("herd", "lateness_p99_ms"), " ms"),
    Row("8", "… instances replayed more than once", "herd", ("herd", "replayed_twice"), "", "0",
        lambda v: v == 0, digits=0),
    Row("8", "… SQL statements per instance, both commands", "herd", ("herd", "statements_per_instance"), "",
        digits=1),
    Row("8", "… CPU per instance, both commands and their processes", "herd", ("herd", "cpu_ms_per_instance"),
        " ms"),
    Row("8", "… CPU per instance, PostgreSQL's backends", "herd", ("herd", "backend_cpu_ms_per_instance"), " ms"),
]


def _counts(results) -> dict:
    cluster = next((results["configs"][c] for c in ("sqlite-orm", "postgres-orm", "postgres-redis")
                    if c in results["configs"]), {})
    herd = next((results["configs"][c] for c in ("postgres-orm-herd", "postgres-redis-herd")
                 if c in results["configs"]), {})
    quick = results["quick"]
    return {
        "count": f"{_get(cluster, 'throughput', 'count') or (200 if quick else 2000):,}",
        "sleepers": f"{_get(cluster, 'idle', 'sleepers') or (2000 if quick else 100_000):,}",
        "due": f"{_get(cluster, 'burst', 'due') or (200 if quick else 10_000):,}",
        "herd": f"{_get(herd, 'herd', 'count') or (1000 if quick else 10_000):,}",
    }


def table_rows(results) -> list[list[str]]:
    rows = []
    counts = _counts(results)
    for row in ROWS:
        cells, met = row.cells(results)
        rows.append([row.part, row.measure.format(**counts), *cells, row.goal, met])
    return rows


HEADER = ["#", "measure", *[c[0] for c in COLUMNS], "goal", "met"]


def markdown_table(rows) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(rows) -> str:
    widths = [max(len(str(r[i])) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    widths[1] = min(widths[1], 64)
    out = []
    for r in [HEADER, ["-" * w for w in widths], *rows]:
        out.append("  ".join(str(c)[:widths[i]].ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


# -- the chart ------------------------------------------------------------------------------------

def chart(results, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    configs = results["configs"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    fig.suptitle("django-durable-workflows benchmarks" + (" (QUICK: small counts, one run)" if results["quick"]
                                                           else ""), fontsize=14)

    def bars(ax, groups, series, title, ylabel, goal=None, goal_label=None, log=False):
        import numpy as np

        x = np.arange(len(groups))
        width = 0.8 / max(len(series), 1)
        for i, (label, stats) in enumerate(series):
            medians = [s["median"] if s else 0 for s in stats]
            low = [s["median"] - s["min"] if s else 0 for s in stats]
            high = [s["max"] - s["median"] if s else 0 for s in stats]
            positions = x + (i - (len(series) - 1) / 2) * width
            ax.bar(positions, medians, width, yerr=[low, high], capsize=3, label=label)
            for p, s in zip(positions, stats):
                if s is None:
                    ax.text(p, 0, "n/m", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, groups, fontsize=9)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        if goal is not None:
            ax.axhline(goal, color="red", linestyle="--", linewidth=1, label=goal_label)
        ax.legend(fontsize=8)

    inproc = [c for c in ("sqlite", "postgres") if c in configs]
    labels = {"sqlite": "SQLite", "postgres": "PostgreSQL", "sqlite-orm": "SQLite\nORM broker",
              "postgres-orm": "PostgreSQL\nORM broker", "postgres-redis": "PostgreSQL\nRedis broker"}
    if inproc:
        bars(axes[0][0], [labels[c] for c in inproc],
             [("INSERT+COMMIT, the driver alone (the floor)", [_get(configs[c], "floor", "us") for c in inproc]),
              ("INSERT+COMMIT through Django", [_get(configs[c], "limit", "us") for c in inproc]),
              ("one step of a 1,000-step workflow, replay()", [_get(configs[c], "step", "us") for c in inproc]),
              ("… through create()", [_get(configs[c], "public", "us") for c in inproc])],
             "1–2. µs per journal write (goal: step through create() ≤ 2× the floor)", "µs")
        bars(axes[0][1], [labels[c] for c in inproc],
             [("django-durable-workflows (inline)", [_get(configs[c], "three", "ours") for c in inproc]),
              ("DBOS Transact", [_get(configs[c], "three", "dbos") for c in inproc])],
             "3. sequential 3-step workflows/s (goal: ≥ 5× DBOS)", "workflows/s")
        ax = axes[1][1]
        for c in inproc:
            sizes = [10, 1000, 10000]
            stats = [_get(configs[c], "journal", str(s), "resume_ms") for s in sizes]
            if all(stats):
                ax.errorbar(sizes, [s["median"] for s in stats],
                            yerr=[[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]],
                            marker="o", capsize=3, label=labels[c])
        ax.axhline(250, color="red", linestyle="--", linewidth=1, label="goal at 10,000: 250 ms")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("journaled steps")
        ax.set_ylabel("ms")
        ax.set_title("6. resume time vs journal size", fontsize=11)
        ax.legend(fontsize=8)
    cluster = [c for c in ("sqlite-orm", "postgres-orm", "postgres-redis") if c in configs]
    if cluster:
        bars(axes[0][2], [labels[c] for c in cluster],
             [("workflows/s", [_get(configs[c], "throughput", "rate") for c in cluster])],
             "4. cluster throughput, 3-step workflows/s", "workflows/s", 300, "goal: 300/s")
        bars(axes[1][0], [labels[c] for c in cluster],
             [("event → resume p50", [_get(configs[c], "latency", "event_p50_ms") for c in cluster]),
              ("event → resume p99", [_get(configs[c], "latency", "event_p99_ms") for c in cluster]),
              ("timer lateness p50", [_get(configs[c], "latency", "timer_p50_ms") for c in cluster]),
              ("timer lateness p99", [_get(configs[c], "latency", "timer_p99_ms") for c in cluster])],
             "5. latency through workflows_worker (goals: 150 / 500 / 1000 ms)", "ms")
        bars(axes[1][2], [labels[c] for c in cluster],
             [("CPU, % of a core", [_get(configs[c], "idle", "cpu_percent") for c in cluster]),
              ("SQL statements/s, all", [_get(configs[c], "idle", "queries_per_second") for c in cluster]),
              ("… of the engine", [_get(configs[c], "idle", "by_kind", "workflows") for c in cluster])],
             f"7. idle, {_counts(results)['sleepers']} instances asleep (goals: < 2%, ≤ 2/s)", "", 2, "goal: 2")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


# -- REPORT.md ------------------------------------------------------------------------------------

METHOD = """\
## How it was measured

`make bench` (`python -m benchmarks`) creates a fresh SQLite file (WAL, `synchronous=NORMAL`, `BEGIN
IMMEDIATE`: the test suite's OPTIONS) and PostgreSQL databases of its own (`bench_workflows`,
`bench_workflows_dbos`, dropped at the end), and runs each part in a child process configured by
`benchmarks/settings.py` (settings of their own, with the `benchmarks` app, whose `workflows.py` the worker
subprocesses load too). Every figure is the median of the runs, with (min–max); ratios are taken pair by
pair within one run, then summarised. The machine has {cores} cores and is shared with other engineers'
test suites, so figures are noisy (load average at the end: {load}).

1. **The limit**: single-row `INSERT INTO django_workflows_step … VALUES (…)` in autocommit (one row, one
   commit) through the Django connection's cursor, with the columns and values of a succeeded `step.do`
   row ({rows} rows a run). This is the cheapest durable journal write; the engine's own insert adds the
   epoch fence and `RETURNING`. The floor beneath it: the same statement through the driver alone, on a
   connection of its own with no Django (`sqlite3` in autocommit with the same pragmas; `psycopg` with
   `autocommit=True`). The gap between the two is Django's cursor (its wrapper, the parameters'
   adaptation, and on PostgreSQL the client-side binding Django uses).
2. **Step overhead**: one replay (`django_workflows.engine.replay.replay`) of a workflow of 1,000 trivial
   `step.do` steps, timed from the claim to the finish; µs per step = time ÷ 1,000, including the replay's
   fixed cost (claim, read, journal load, finish), i.e. all of it. Ratio = that ÷ the µs per INSERT of the
   same run. Then the same workflow through the public API, as a user runs it: `create()` on the inline
   executor, timed whole (the instance's insert, its task handed to the executor, the replay): the gap
   between the two is the workflow's fixed cost spread over its 1,000 steps. Its ratio is taken against
   the driver's own INSERT + COMMIT, the floor.
3. **Sequential 3-step workflows/s**: `create()` on the inline executor (which runs the replay to
   completion inside the call), one after another, against calling a DBOS Transact {dbos} workflow of three
   `@DBOS.step`s directly, {three} of each a run, the order alternating between runs. DBOS's system database is
   SQLite (its own file, with WAL and `synchronous=NORMAL` set on every connection, as ours) or PostgreSQL
   (`bench_workflows_dbos` on the same server), `application_version` pinned to `bench-1`.
4. **Cluster throughput**: one `python -m django workflows_worker --workers 2` (the production page's recommended
   `Q_CLUSTER`: `poll` 0.1 s, `queue_limit` 8; engine settings at their defaults), already warm; 2,000
   instances of `bench-three` created with `create_batch` (100 a batch) while it runs; rate = 2,000 ÷ (the
   last `ended_at` − the first create).
5. **Latency**, through the same worker: event → resume = the wall-clock time journaled by the step right
   after `wait_for_event` − the time `send_event` was called, one event at a time ({events} a run, with a
   random 0–100 ms pause between them); timer lateness = the time journaled by the step after
   `sleep_until` − the wake time, for {timers} timers a run spread over 5 seconds. p50 and p99 per run.
6. **The journal's scale**: an instance of N trivial steps and a sleep, built by the engine; then, per
   run, rewound to "due" and resumed by one timed replay (claim, read, one journal query, N journaled
   steps answered from memory, the sleep marked done, finish). Queries counted with Django's
   `CaptureQueriesContext`.
7. **Idle cost**: {sleepers:,} `bench-napper` instances asleep for a day, bulk-inserted (instance row +
   its sleep's journal row), the worker running; after {settle} s to settle, {windows} window(s) of {window} s:
   CPU = utime + stime from `/proc/<pid>/stat` of the worker command and every process under it, ÷ wall
   time; statements = every SQL statement of every one of those processes, counted by an `execute_wrapper`
   installed on each connection (`benchmarks/querylog.py`; BEGIN/COMMIT issued by the PostgreSQL driver
   are not statements and are not counted); transactions = the `xact_commit + xact_rollback` delta of
   `pg_stat_database` for the benchmark's database, read over a connection to another database
   (pg_stat_statements is not loaded on this server: `shared_preload_libraries` is empty). Then
   {due:,} of the sleepers made due at once (one UPDATE of their wake times): seconds from that moment
   until the last one completed.
8. **The thundering herd**: two `workflows_worker --workers 2` commands (two machines' worth of workers:
   this machine has {cores} cores, so four worker processes already share them) on the same PostgreSQL
   database and broker, warm; {herd:,} `bench-napper` sleepers bulk-inserted as in part 7, then all given
   one wake time two seconds ahead (one UPDATE). Seconds from that wake time until the last one completed;
   timer lateness = the time journaled by the step after the sleep − the wake time, p50 and p99 over the
   instances of a run; replayed more than once = instances whose epoch passed 2 (inserted at epoch 1, each
   lease taken adds one, so a second replay of any kind shows); statements counted as in part 7, in both
   commands and all their processes, ÷ the instances; CPU likewise from `/proc` (PostgreSQL's backends:
   those alive at the end of the run; a connection closed meanwhile, as `CONN_MAX_AGE` closes them, takes
   its backend's CPU with it, so that row is a floor).
"""


def max_age_table(results) -> list[str]:
    """postgres-orm (CONN_MAX_AGE 60) against the same with Django's default CONN_MAX_AGE = 0."""
    configs = results["configs"]
    if "postgres-orm-max-age-0" not in configs or "postgres-orm" not in configs:
        return []
    measures = [
        ("throughput, workflows/s (2,000 a run against 500 a run)", ("throughput", "rate"), ""),
        ("worker CPU per workflow", ("throughput", "worker_cpu_ms"), " ms"),
        ("event → resume p50", ("latency", "event_p50_ms"), " ms"),
        ("event → resume p99", ("latency", "event_p99_ms"), " ms"),
        ("timer lateness p99", ("latency", "timer_p99_ms"), " ms"),
        ("idle CPU, % of a core", ("idle", "cpu_percent"), "%"),
        ("idle SQL statements/s", ("idle", "queries_per_second"), "/s"),
        ("idle transactions/s (pg_stat_database)", ("idle", "commits_per_second"), "/s"),
    ]
    lines = ["### PostgreSQL with the ORM broker: persistent connections against Django's default", "",
             "| measure | CONN_MAX_AGE = 60 (the table above) | CONN_MAX_AGE = 0 (Django's default) |",
             "|---|---|---|"]
    for label, path, unit in measures:
        lines.append(f"| {label} | {fmt(_get(configs['postgres-orm'], *path), unit)} | "
                     f"{fmt(_get(configs['postgres-orm-max-age-0'], *path), unit)} |")
    return lines + [""]


def scheduled_table(results) -> list[str]:
    """postgres-orm's idle cost against the same with schedules and limits declared."""
    configs = results["configs"]
    if "postgres-orm-scheduled" not in configs or "postgres-orm" not in configs:
        return []
    measures = [
        ("idle CPU, % of a core", ("idle", "cpu_percent"), "%"),
        ("idle SQL statements/s, all processes", ("idle", "queries_per_second"), "/s"),
        ("… of the engine", ("idle", "by_kind", "workflows"), "/s"),
        ("idle transactions/s (pg_stat_database)", ("idle", "commits_per_second"), "/s"),
    ]
    lines = ["### PostgreSQL with the ORM broker: an idle worker with schedules and limits declared", "",
             "The same worker and sleepers, with 50 workflows declaring two cron schedules each (not due while it "
             "runs) and 50 declaring `concurrency = 10` and `rate_limit = \"100/minute\"`.", "",
             "| measure | none declared (the table above) | 100 schedules and 50 limited workflows |",
             "|---|---|---|"]
    for label, path, unit in measures:
        lines.append(f"| {label} | {fmt(_get(configs['postgres-orm'], *path), unit)} | "
                     f"{fmt(_get(configs['postgres-orm-scheduled'], *path), unit)} |")
    return lines + [""]


# Part 4 on the other executors, with how each runs the replays: the configuration, its column's heading.
OTHER_EXECUTORS = [
    ("postgres-tasks", "tasks executor, 2 × `db_worker`",
     "the tasks executor (`django_workflows.executors.tasks.TasksExecutor`), replayed by two `manage.py db_worker "
     "--interval 0.1` processes of django-tasks-db (one task at a time each)"),
    ("postgres-celery", "Celery executor, `celery worker --concurrency 2`, Redis",
     "the Celery executor (`django_workflows.executors.celery.CeleryExecutor`), replayed by one `celery worker` "
     "of two prefork pool processes on the Redis broker, with `CELERY_DB_REUSE_MAX` set as the how-to advises "
     "(Celery's defaults otherwise)"),
]


def executors_table(results) -> list[str]:
    """Part 4 on PostgreSQL: django-q2 (postgres-orm) against the other executors that were measured."""
    configs = results["configs"]
    others = [(name, heading, what) for name, heading, what in OTHER_EXECUTORS if name in configs]
    if not others or "postgres-orm" not in configs:
        return []
    measures = [
        ("throughput, 3-step workflows/s", ("throughput", "rate"), "/s"),
        ("CPU per workflow: the worker processes", ("throughput", "worker_cpu_ms"), " ms"),
        ("CPU per workflow: PostgreSQL's backends", ("throughput", "backend_cpu_ms"), " ms"),
    ]
    lines = ["### PostgreSQL: django-q2 against the other executors", "",
             "Part 4 again, the same instances, on " + "; and on ".join(what for _, _, what in others)
             + "; with `workflows_worker --no-cluster` beside them.", "",
             "| measure | django-q2, `workflows_worker --workers 2` (the table above) | "
             + " | ".join(heading for _, heading, _ in others) + " |",
             "|---|---|" + "---|" * len(others)]
    for label, path, unit in measures:
        lines.append(f"| {label} | {fmt(_get(configs['postgres-orm'], *path), unit)} | "
                     + " | ".join(fmt(_get(configs[name], *path), unit) for name, _, _ in others) + " |")
    return lines + [""]


def synchronous_table(results) -> list[str]:
    """SQLite with synchronous=NORMAL (the table above) against FULL, which the install page recommends."""
    configs = results["configs"]
    if "sqlite-full" not in configs or "sqlite" not in configs:
        return []
    measures = [
        ("INSERT + COMMIT of a journal row, µs", ("limit", "us"), ""),
        ("1,000-step workflow, µs per step (inline)", ("step", "us"), ""),
        ("3-step workflows/s, sequential (inline)", ("three", "ours"), ""),
        ("resume with 10,000 journaled steps", ("journal", "10000", "resume_ms"), " ms"),
    ]
    lines = ["### SQLite: synchronous=NORMAL against FULL", "",
             "FULL syncs the WAL at every commit, so nothing acknowledged is lost to a power cut; NORMAL may lose "
             "the last commits (never corrupts the file).", "",
             "| measure | synchronous = NORMAL (the table above) | synchronous = FULL (the install page's setting) |",
             "|---|---|---|"]
    for label, path, unit in measures:
        lines.append(f"| {label} | {fmt(_get(configs['sqlite'], *path), unit)} | "
                     f"{fmt(_get(configs['sqlite-full'], *path), unit)} |")
    return lines + [""]


def scale_summary(path: Path) -> list[str]:
    """The last ``make bench SCALE=1`` run's figures (``SCALE.md`` down to its verdict, without the
    plans), so that this report holds every goal: the scale part runs apart, for its fifteen minutes."""
    if not path.exists():
        return []
    text = path.read_text().split("\n")
    verdict = next((i for i, line in enumerate(text) if line.startswith(("Every goal met.", "Missed: "))), None)
    if verdict is None:
        return []
    body = [("#" + line if line.startswith("###") else line) for line in text[1:verdict + 1]]
    return ["## Scale: a million instances (`make bench SCALE=1`, from `SCALE.md`)", "", *body, "",
            "The plans of every query, and the figures from before migration 0018: `SCALE.md`.", ""]


def write(results: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = table_rows(results)
    print()
    print(text_table(rows))
    print()
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    has_chart = chart(results, out_dir / "report.png")
    configs = results["configs"]
    any_inproc = next((configs[c] for c in ("sqlite", "postgres") if c in configs), {})
    any_cluster = next((configs[c] for c in ("sqlite-orm", "postgres-orm", "postgres-redis") if c in configs), {})
    quick = results["quick"]
    idle = any_cluster.get("idle", {})
    machine = results.get("machine", {})
    method = METHOD.format(
        cores=machine.get("cores", "?"),
        load=", ".join(f"{v:.1f}" for v in machine.get("load_average", [])) or "?",
        rows=_get(any_inproc, "limit", "rows") or "?",
        dbos=machine.get("dbos") or "(not installed)",
        three=_get(any_inproc, "three", "count") or "?",
        events=_get(any_cluster, "latency", "events") or "?",
        timers=_get(any_cluster, "latency", "timers") or "?",
        sleepers=idle.get("sleepers") or 0,
        settle=3 if quick else 10,
        windows=1 if quick else 3,
        window=idle.get("window_seconds") or "?",
        due=_get(any_cluster, "burst", "due") or 0,
        herd=_get(configs.get("postgres-orm-herd") or configs.get("postgres-redis-herd"), "herd", "count") or 0,
    )
    lines = [
        "# Benchmarks" + (" (QUICK run: small counts, one run each; not for reading figures)" if quick else ""),
        "",
        f"Generated by `make bench{' QUICK=1' if quick else ''}` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime(results['started']))} UTC "
        f"in {results['seconds'] / 60:.1f} minutes. Machine: {machine.get('cores')} cores, Python "
        f"{machine.get('python')}, Django {machine.get('django')}, django-q2 {machine.get('django_q2')}, "
        f"SQLite {machine.get('sqlite')}, PostgreSQL {machine.get('postgres', 'not reached')} "
        f"(synchronous_commit {machine.get('postgres_synchronous_commit', '?')}), DBOS Transact "
        f"{machine.get('dbos', 'not installed')}.",
        "",
        "Cells: median (min–max) over the runs; ✓ / ✗ against the goal. Parts 1–3 and 6 run in one process"
        " on the inline executor (no broker: the third column does not apply); parts 4, 5 and 7 run through"
        " `workflows_worker`, with the ORM broker on SQLite and PostgreSQL, and with the Redis broker on"
        " PostgreSQL; part 8 through two `workflows_worker` commands, on PostgreSQL only.",
        "",
        markdown_table(rows),
        "",
    ]
    for name, why in {**results["skipped"], **results["failed"]}.items():
        lines.append(f"- **{name} not measured**: {why}")
    dbos_errors = {c: _get(configs.get(c), "three", "dbos_error") for c in ("sqlite", "postgres")}
    for name, why in dbos_errors.items():
        if why:
            lines.append(f"- **DBOS on {name} not measured**: {why}")
    if results.get("dbos_missing"):
        lines.append(f"- **DBOS not measured**: {results['dbos_missing']}")
    lines.append("")
    if has_chart:
        lines += ["![benchmark chart](report.png)", ""]
    details = []
    for c in ("sqlite-orm", "postgres-orm", "postgres-redis"):
        idle_c = _get(configs.get(c), "idle")
        if idle_c:
            kinds = ", ".join(f"{k} {fmt(v, '/s')}" for k, v in idle_c["by_kind"].items() if v)
            details.append(f"- {c}: idle statements by kind: {kinds}; idle CPU by process (% of a core, "
                           f"first window): " + ", ".join(f"{k} {v:.2f}" for k, v in idle_c['per_process_cpu'][0].items()))
        burst = _get(configs.get(c), "burst")
        if burst:
            details.append(f"- {c}: {burst['due']:,} due at once resumed at {burst['rate']:.0f}/s "
                           f"({burst['seconds']:.1f} s, one run)")
    for c in ("postgres-orm-herd", "postgres-redis-herd"):
        runs = _get(configs.get(c), "herd", "runs")
        if runs:
            details.append(f"- {c}: herd runs " + "; ".join(
                f"{r['seconds']:.1f} s (lateness p99 {r['lateness_p99_ms'] / 1000:.1f} s, epochs {r['epochs']})"
                for r in runs))
    for c in ("sqlite-orm", "postgres-orm", "postgres-redis", "postgres-orm-max-age-0"):
        t = _get(configs.get(c), "throughput")
        if t:
            details.append(f"- {c}: throughput runs {', '.join(f'{r:.0f}' for r in t['rate']['runs'])}/s; CPU per "
                           f"workflow: worker command and its processes {fmt(t['worker_cpu_ms'], ' ms')}"
                           + f"; the whole machine (everyone's processes) {fmt(t['machine_busy'] and {**t['machine_busy'], **{k: t['machine_busy'][k] * 100 for k in ('median', 'min', 'max')}}, '%', 0)} busy")
    for c in ("sqlite", "postgres"):
        journal = _get(configs.get(c), "journal", "10000")
        if journal:
            details.append(f"- {c}: a resume with 10,000 journaled steps ran {journal['queries']} queries: "
                           + "; ".join(f"`{s[:70]}…`" for s in journal["statements"]))
            details.append(f"- {c}: loading the 10,000-row journal alone took {fmt(journal['load_ms'], ' ms')}")
    if details:
        lines += ["### Details", "", *details, ""]
    lines += max_age_table(results)
    lines += scheduled_table(results)
    lines += executors_table(results)
    lines += synchronous_table(results)
    if not quick:
        past = history.record(results, out_dir)
        lines += history.markdown(past, with_chart=history.chart(past, out_dir / "history.png"))
    lines += scale_summary(HERE / "SCALE.md")
    lines += ab_report.section(out_dir)
    lines.append(method)
    profiles = HERE / "PROFILES.md"
    if profiles.exists():
        lines += ["", profiles.read_text()]
    (out_dir / "REPORT.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out_dir / 'REPORT.md'}" + (f" and {out_dir / 'report.png'}" if has_chart else ""))
