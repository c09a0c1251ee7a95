"""``benchmarks/SCALE.md``: the scale benchmark's figures, each with its goal and whether it was met, and
the key lines of each path's query plans."""

from __future__ import annotations

import os
import platform
import time


def _machine() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
    return (f"{os.cpu_count()} cores, Python {platform.python_version()}, PostgreSQL {version}, "
            f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")


def render(loaded: dict, results: list[dict], goal_ms: float, idle: dict | None = None) -> str:
    tables = loaded["tables"]
    rows = {name: t.get("rows") for name, t in tables.items() if "rows" in t}
    busy = os.getloadavg()[0] > (os.cpu_count() or 1)
    lines = [
        "# Scale: the request paths over a million instances",
        "",
        *(["**The machine was busy** (load average above its number of cores, other processes running): "
           "the times are those of a shared machine, several times an idle one's; the plans are not "
           "affected.", ""] if busy else []),
        f"Written by `make bench SCALE=1` (`python -m benchmarks --scale`) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{_machine()}.",
        "",
        "Loaded with `COPY` into the migrated tables (`benchmarks/scale_load.py`): "
        + ", ".join(f"{n:,} rows in `{name}`" for name, n in rows.items())
        + f"; instance {loaded['big_instance']} has 10,000 steps; half the instances are about a user "
        "(ten a user), each has a tenant (1,000 of them) and a region (4) as tags, one in ten a customer. "
        + (f"The load took {loaded['seconds']:.0f} s "
           "(" + ", ".join(f"{k}: {v['seconds']} s" for k, v in tables.items()) + ")."
           if "seconds" in loaded else "The load was reused (`--reuse`)."),
        "",
        f"Each path timed over {results[0].get('repeat', 'repeated')} requests in-process (Django's "
        f"test client, a superuser logged in; the API with a token) after one warm-up request. Goal: p99 at "
        f"most {goal_ms:.0f} ms, and no sequential scan of `django_workflows_instance`, "
        f"`django_workflows_step` or `django_workflows_instancetag` (EXPLAIN of every query of the warm-up "
        f"request that touches the workflow tables).",
        "",
        "| path | p50 ms | p99 ms | queries | seq scan of instance/step/tags | goal | met |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for row in results:
        goal = f"p99 ≤ {row['goal_ms']:.0f} ms, no seq scan" if row["goal_ms"] else "no seq scan"
        lines.append(f"| {row['name']} | {row['p50']:.1f} | {row['p99']:.1f} | {row['queries']} | "
                     f"{', '.join(row['seq_scans']) or 'no'} | {goal} | {'met' if row['met'] else '**missed**'} |")
    missed = [row["name"] for row in results if not row["met"]]
    if idle is not None:
        lines += _idle(idle)
        if not idle["met"]:
            missed.append("idle worker")
    lines += ["", "Every goal met." if not missed else f"Missed: {', '.join(missed)}.", "",
              "## The plans' key lines", "",
              "Each query of the path that touches the workflow tables, with the scans of its plan "
              "(estimated rows).", ""]
    for row in results:
        lines.append(f"### {row['name']}")
        lines.append("")
        for query in row["explained"]:
            sql = " ".join(query["sql"].split())
            lines.append(f"- `{sql[:160]}{'…' if len(sql) > 160 else ''}`")
            for scan in query["scans"]:
                lines.append(f"  - {scan}")
        if not row["explained"]:
            lines.append("- no query of the workflow tables")
        lines.append("")
    return "\n".join(lines)


def _idle(idle: dict) -> list[str]:
    """The idle worker's rows: CPU and statements per second, against part 7's goals."""
    cpu, statements = idle["cpu_percent"], idle["queries_per_second"]
    commits = idle.get("commits_per_second")
    cpu_met = "met" if cpu["median"] < idle["cpu_goal"] else "**missed**"
    statements_met = "met" if statements["median"] <= idle["statements_goal"] else "**missed**"

    def cell(value: dict, unit: str) -> str:
        return f"{value['median']:.2f}{unit} ({value['min']:.2f}–{value['max']:.2f})"

    changed = "; ".join(f"{what}: {count:,}" for what, count in idle["changed"].items())
    return [
        "",
        "### An idle worker on the million",
        "",
        f"A real `workflows_worker --workers 2` on the loaded database, after nothing was left due ({changed}; "
        f"`RETENTION_DAYS` 365): {len(cpu['runs'])} windows of {idle['window_seconds']:.0f} s, as part 7 of "
        "`make bench` measures it on 100,000 sleepers.",
        "",
        "| measure | on the million | goal (part 7) | met |",
        "|---|---:|---|---|",
        f"| CPU of the worker and its processes | {cell(cpu, '% of a core')} | < {idle['cpu_goal']:.0f}% | {cpu_met} |",
        f"| SQL statements/s, all processes | {cell(statements, '/s')} | ≤ {idle['statements_goal']:.0f}/s | {statements_met} |",
        *([f"| PostgreSQL commits/s | {cell(commits, '/s')} | | |"] if commits else []),
    ]
