"""``make bench BASE=<commit>`` (``python -m benchmarks --base <commit>``): parts 2 to 5 of HEAD and of
a base commit, interleaved in one run, and each figure's ratio HEAD ÷ base with its spread.

A change is judged against its parent in the same run, never against figures from another day or
machine: on a shared machine, the load of the minute moves every figure more than most changes do. So
the two sides alternate in pairs (HEAD then base, then base then HEAD, ...), each run in a fresh
process after the same warm-up, and the ratio is taken pair by pair: its spread (min–max over the
pairs) says how much of the difference is noise.

Per database (SQLite, and PostgreSQL when reachable), each side has databases of its own, migrated by
its own package (the base's migrations may differ): parts 2 and 3 run in ``benchmarks.ab_inproc``, parts
4 and 5 in ``benchmarks.cluster --parts throughput,latency``. The base side is HEAD's benchmark code with
only the base's package on its path (``benchmarks/ab_base.py``). The figures, the ratios and each pair go
to ``AB.md``, into ``REPORT.md``'s A/B section, and into ``history.json`` (``benchmarks/ab_report.py``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import ab_base, ab_report
from benchmarks.common import log
from benchmarks.services import POSTGRES_URL, Postgres, child_env

INLINE = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


def _run(side: ab_base.Side, args: list[str], env: dict, timeout: float) -> str | None:
    """``python -m <args>`` on ``side``'s interpreter from its own directory; None, or why it failed."""
    log(f"== {side.label} {side.commit}: {' '.join(a for a in args if not a.startswith('/'))}")
    try:
        completed = subprocess.run([side.python, "-m", *args], cwd=side.root, env=side.env(env), timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f} s"
    return None if completed.returncode == 0 else f"exit code {completed.returncode}"


def _median_of_runs(value):
    """A cluster child's figure is a summary of its own runs: a pair compares their medians."""
    return value.get("median") if isinstance(value, dict) else value


def _figures(kind: str, data: dict) -> dict[str, float | None]:
    if kind == "inproc":
        return {key: data.get(key) for key in ab_report.INPROC_KEYS}
    figures = {}
    for key, path in ab_report.CLUSTER_PATHS.items():
        value = data
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        figures[key] = _median_of_runs(value)
    return figures


def run(base: str, quick: bool, out_dir: Path, keep: bool = False, only: set[str] | None = None) -> int:
    started = time.time()
    sides = [ab_base.head(), ab_base.build(base)]
    work = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    pairs = {"inproc": 2 if quick else 5, "cluster": 2 if quick else 3}
    backends: dict[str, dict] = {"sqlite": {}, "postgres": {}}
    databases = {"postgres": {s.label: Postgres(POSTGRES_URL.rsplit("/", 1)[0] + f"/bench_ab_{s.label.lower()}")
                              for s in sides}}
    pg_missing = databases["postgres"]["HEAD"].reachable()
    failed: dict[str, str] = {}
    try:
        for backend in ("sqlite", "postgres"):
            if only and backend not in only:
                continue
            if backend == "postgres" and pg_missing:
                log(f"== postgres: not measured ({pg_missing})")
                failed["postgres"] = pg_missing
                continue
            dbs = {}
            for side in sides:
                if backend == "sqlite":
                    dbs[side.label] = {"name": str(work / f"ab-{side.label.lower()}.sqlite3")}
                else:
                    pg = databases["postgres"][side.label]
                    pg.create()
                    dbs[side.label] = {"name": pg.name, "url": pg.url()}
                env = child_env(dbs[side.label], "orm", {})
                subprocess.run([side.python, "-m", "django", "migrate", "-v", "0"], cwd=side.root,
                               env=side.env(env), check=True)
            runs: dict = {"inproc": [], "cluster": []}
            for kind, count in pairs.items():
                for n in range(count):
                    # Alternate who goes first, so that drift (others' load) favours neither side.
                    order = sides if n % 2 == 0 else sides[::-1]
                    pair: dict = {}
                    for side in order:
                        out = work / f"{backend}-{kind}-{n}-{side.label}.json"
                        if kind == "inproc":
                            args = ["benchmarks.ab_inproc", "--out", str(out)]
                            env = child_env(dbs[side.label], "orm", INLINE)
                        else:
                            args = ["benchmarks.cluster", "--out", str(out), "--work-dir", str(work), "--name",
                                    f"ab-{backend}-{side.label.lower()}-{n}", "--parts", "throughput,latency"]
                            env = child_env(dbs[side.label], "orm", {})
                        failure = _run(side, [*args, *(["--quick"] if quick else [])], env, timeout=1200)
                        if failure:
                            failed[f"{backend} {kind} {side.label}"] = failure
                            break
                        pair[side.label] = _figures(kind, json.loads(out.read_text()))
                    if len(pair) == 2:
                        pair["first"] = order[0].label
                        runs[kind].append(pair)
            backends[backend] = runs
    finally:
        if not keep:
            for pg in databases["postgres"].values():
                if not pg_missing:
                    try:
                        pg.drop()
                    except Exception as exc:
                        log(f"could not drop {pg.name}: {exc}")
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work} and the bench_ab_* databases")
    results = {"head": sides[0].commit, "base": sides[1].commit, "base_ref": base, "quick": quick,
               "started": started, "seconds": time.time() - started, "pairs": pairs,
               "backends": {b: r for b, r in backends.items() if r}, "failed": failed}
    ab_report.write(results, out_dir)
    return 1 if failed else 0

