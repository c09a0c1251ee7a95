"""The headline figures of every full ``make bench`` run, per commit: ``benchmarks/history.json``, the
"History" table of REPORT.md and ``benchmarks/history.png`` (each figure over the runs, against its goal).

``make bench BASE=...`` adds entries of another shape, holding its pairs (``benchmarks/ab_report.py``):
the table and the chart here leave them out. A quick run (CI's) is not recorded: its small counts are not comparable with a full run's. A run made
on a working tree with uncommitted changes is recorded under its commit with ``+`` (not yet committed).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Headline:
    label: str
    config: str
    path: tuple[str, ...]
    unit: str
    goal: float | None = None
    higher_is_better: bool = False

    def value(self, results: dict) -> float | None:
        value = results.get("configs", {}).get(self.config)
        for key in self.path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        if isinstance(value, dict):  # a summary of the runs: its median
            value = value.get("median")
        return value if isinstance(value, (int, float)) else None

    def met(self, value: float | None) -> str:
        if value is None or self.goal is None:
            return ""
        return " ✓" if (value >= self.goal if self.higher_is_better else value <= self.goal) else " ✗"


HEADLINES = [
    Headline("SQLite step, µs", "sqlite", ("step", "us"), " µs"),
    Headline("PostgreSQL step, µs", "postgres", ("step", "us"), " µs"),
    Headline("SQLite step through create() ÷ driver", "sqlite", ("public", "ratio"), "×", 2.0),
    Headline("PostgreSQL step through create() ÷ driver", "postgres", ("public", "ratio"), "×", 2.0),
    Headline("SQLite ours ÷ DBOS", "sqlite", ("three", "ratio"), "×", 5.0, True),
    Headline("PostgreSQL ours ÷ DBOS", "postgres", ("three", "ratio"), "×", 5.0, True),
    Headline("cluster, PostgreSQL ORM broker, workflows/s", "postgres-orm", ("throughput", "rate"), "/s", 300.0,
             True),
    Headline("event → resume p99, PostgreSQL ORM broker, ms", "postgres-orm", ("latency", "event_p99_ms"), " ms",
             500.0),
    Headline("timer lateness p99, PostgreSQL ORM broker, ms", "postgres-orm", ("latency", "timer_p99_ms"), " ms",
             1000.0),
    Headline("idle CPU, PostgreSQL ORM broker, % of a core", "postgres-orm", ("idle", "cpu_percent"), "%", 2.0),
    Headline("resume of 10,000 journaled steps, PostgreSQL, ms", "postgres", ("journal", "10000", "resume_ms"),
             " ms", 250.0),
    Headline("herd of 10,000 due at once, PostgreSQL ORM broker, s", "postgres-orm-herd", ("herd", "seconds"),
             " s", 10.0),
]


def commit_of(root: Path) -> str:
    """The commit the run measured: its short hash, with ``+`` if the working tree had changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def entry_of(results: dict, commit: str) -> dict:
    return {"commit": commit, "date": time.strftime("%Y-%m-%d", time.gmtime(results.get("started", time.time()))),
            "figures": {h.label: h.value(results) for h in HEADLINES}}


def record(results: dict, out_dir: Path) -> list[dict]:
    """Add this run to ``out_dir/history.json`` and return the history, oldest first."""
    path = out_dir / "history.json"
    history = json.loads(path.read_text()) if path.exists() else []
    history.append(entry_of(results, commit_of(HERE.parent)))
    path.write_text(json.dumps(history, indent=1, ensure_ascii=False) + "\n")
    return history


def _cell(headline: Headline, value: float | None) -> str:
    if value is None:
        return "—"
    text = f"{value:,.2f}" if abs(value) < 10 else f"{value:,.0f}"
    return text + headline.met(value)


def markdown(history: list[dict], with_chart: bool = False) -> list[str]:
    """The "History" section: one row per run, oldest first, each headline figure with ✓ / ✗ against its goal."""
    history = [entry for entry in history if "figures" in entry]  # A/B entries: benchmarks/ab_report.py
    if not history:
        return []
    goals = ", ".join(f"{h.label} {'≥' if h.higher_is_better else '≤'} {h.goal:g}" for h in HEADLINES
                      if h.goal is not None)
    lines = ["## History", "",
             "The headline figures of each full `make bench` run (medians), oldest first; `+` after a commit: "
             f"run on uncommitted changes over it. Goals: {goals}.", "",
             "| commit | date | " + " | ".join(h.label for h in HEADLINES) + " |",
             "|---|---|" + "---|" * len(HEADLINES)]
    for entry in history:
        cells = [_cell(h, entry["figures"].get(h.label)) for h in HEADLINES]
        lines.append(f"| {entry['commit']} | {entry['date']} | " + " | ".join(cells) + " |")
    return lines + ["", *(["![history chart](history.png)", ""] if with_chart else [])]


def chart(history: list[dict], path: Path) -> bool:
    """Each headline figure over the runs, with its goal as a dashed line: the last point against the
    one before it is this run against the previous."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    history = [entry for entry in history if "figures" in entry]
    if not history:
        return False
    columns = 4
    rows = -(-len(HEADLINES) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.8 * rows), squeeze=False)
    commits = [entry["commit"] for entry in history]
    for n, headline in enumerate(HEADLINES):
        ax = axes[n // columns][n % columns]
        values = [entry["figures"].get(headline.label) for entry in history]
        points = [(i, v) for i, v in enumerate(values) if v is not None]
        if points:
            ax.plot([i for i, _ in points], [v for _, v in points], marker="o")
            last_i, last_v = points[-1]
            ax.annotate(_cell(headline, last_v).replace(" ✓", "").replace(" ✗", ""), (last_i, last_v),
                        fontsize=8, textcoords="offset points", xytext=(4, 4))
        if headline.goal is not None:
            ax.axhline(headline.goal, color="red", linestyle="--", linewidth=1)
        ax.set_title(headline.label, fontsize=9)
        ax.set_xticks(range(len(commits)), commits, fontsize=7, rotation=45)
    for n in range(len(HEADLINES), rows * columns):
        axes[n // columns][n % columns].axis("off")
    fig.suptitle("Headline figures per run (dashed: the goal)", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return True
