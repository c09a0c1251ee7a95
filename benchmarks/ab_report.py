"""The A/B run's report (``benchmarks/ab.py``): ``AB.md``, the same section in ``REPORT.md`` (between
markers, so that a later full run's ``REPORT.md`` keeps the last A/B, as it keeps ``SCALE.md``), and an
entry of ``history.json`` holding every pair's figures, so the ratios can be taken again later."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

START, END = "<!-- A/B: written by make bench BASE=... -->", "<!-- /A/B -->"


@dataclass(frozen=True)
class Figure:
    part: str
    label: str
    kind: str  # "inproc" (benchmarks.ab_inproc) or "cluster" (benchmarks.cluster)
    key: str
    unit: str
    higher_is_better: bool = False
    digits: int | None = None  # None: by magnitude


FIGURES = [
    Figure("1", "INSERT + COMMIT, the driver alone (the reference, no package in it), µs", "inproc", "floor_us", ""),
    Figure("1", "INSERT + COMMIT through Django's cursor (the reference), µs", "inproc", "limit_us", ""),
    Figure("2", "1,000-step workflow, replay(), µs per step", "inproc", "step_us", ""),
    Figure("2", "… step ÷ Django's INSERT + COMMIT", "inproc", "step_ratio", "×"),
    Figure("2", "1,000-step workflow through create() (inline), µs per step", "inproc", "public_us", ""),
    Figure("2", "… step through create() ÷ the driver's INSERT + COMMIT", "inproc", "public_ratio", "×"),
    Figure("3", "3-step workflows/s, sequential create() (inline)", "inproc", "three_rate", "/s", True),
    Figure("3", "… SQL statements of one (goal of issue 37: ≤ 4 commits)", "inproc", "three_statements", "", digits=0),
    Figure("3", "… commits of one", "inproc", "three_commits", "", digits=0),
    Figure("4", "3-step workflows/s through workflows_worker --workers 2", "cluster", "throughput", "/s", True),
    Figure("5", "event → resume, p50", "cluster", "event_p50", " ms"),
    Figure("5", "event → resume, p99", "cluster", "event_p99", " ms"),
    Figure("5", "timer lateness, p50", "cluster", "timer_p50", " ms"),
    Figure("5", "timer lateness, p99", "cluster", "timer_p99", " ms"),
]
INPROC_KEYS = [f.key for f in FIGURES if f.kind == "inproc"]
CLUSTER_PATHS = {"throughput": ("throughput", "rate"), "event_p50": ("latency", "event_p50_ms"),
                 "event_p99": ("latency", "event_p99_ms"), "timer_p50": ("latency", "timer_p50_ms"),
                 "timer_p99": ("latency", "timer_p99_ms")}
BACKENDS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def _num(value: float) -> str:
    magnitude = abs(value)
    return f"{value:,.{0 if magnitude >= 100 else 1 if magnitude >= 10 else 2}f}"


def _spread(values: list[float], unit: str = "", digits: int | None = None) -> str:
    if not values:
        return "not measured"
    show = (lambda v: f"{v:.{digits}f}") if digits is not None else _num
    median = show(statistics.median(values)) + unit
    return median if len(values) == 1 else f"{median} ({show(min(values))}–{show(max(values))})"


def values(pairs: list[dict], figure: Figure, side: str) -> list[float]:
    return [p[side][figure.key] for p in pairs if p[side].get(figure.key) is not None]


def ratios(pairs: list[dict], figure: Figure) -> list[float]:
    """HEAD ÷ base pair by pair, for the pairs where both sides measured the figure."""
    return [p["HEAD"][figure.key] / p["base"][figure.key] for p in pairs
            if p["HEAD"].get(figure.key) is not None and p["base"].get(figure.key)]


def verdict(figure: Figure, pair_ratios: list[float]) -> str:
    """Better or worse only when every pair agrees: a spread that holds 1 is within the noise."""
    if not pair_ratios:
        return ""
    better = [(r > 1) if figure.higher_is_better else (r < 1) for r in pair_ratios]
    worse = [(r < 1) if figure.higher_is_better else (r > 1) for r in pair_ratios]
    if figure.part == "1":
        return "reference"
    if all(r == 1 for r in pair_ratios):
        return "the same"
    return "HEAD better" if all(better) else "HEAD worse" if all(worse) else "within the spread"


def backend_lines(name: str, runs: dict) -> list[str]:
    lines = [f"### {BACKENDS[name]}", "",
             "| # | measure | HEAD | base | HEAD ÷ base (min–max over the pairs) | |", "|---|---|---|---|---|---|"]
    for figure in FIGURES:
        pairs = runs.get(figure.kind, [])
        pair_ratios = ratios(pairs, figure)
        lines.append(f"| {figure.part} | {figure.label} | {_spread(values(pairs, figure, 'HEAD'), figure.unit, figure.digits)} | "
                     f"{_spread(values(pairs, figure, 'base'), figure.unit, figure.digits)} | {_spread(pair_ratios, '×', 2)} | "
                     f"{verdict(figure, pair_ratios)} |")
    lines += ["", "The pairs, HEAD / base (the side that ran first in bold):", "",
              "| measure | " + " | ".join(f"{kind} pair {n + 1}" for kind in ("inproc", "cluster")
                                          for n in range(len(runs.get(kind, [])))) + " |",
              "|---|" + "---|" * sum(len(runs.get(kind, [])) for kind in ("inproc", "cluster"))]
    for figure in FIGURES:
        cells = []
        for kind in ("inproc", "cluster"):
            for pair in runs.get(kind, []):
                if kind != figure.kind:
                    cells.append("")
                    continue
                h, b = pair["HEAD"].get(figure.key), pair["base"].get(figure.key)
                text = {s: ("—" if v is None else _num(v)) for s, v in (("HEAD", h), ("base", b))}
                text[pair["first"]] = f"**{text[pair['first']]}**"
                cells.append(f"{text['HEAD']} / {text['base']}")
        lines.append(f"| {figure.label} | " + " | ".join(cells) + " |")
    return lines + [""]


def markdown(results: dict) -> list[str]:
    quick = " QUICK=1" if results["quick"] else ""
    lines = [START, f"## A/B: HEAD {results['head']} against {results['base']} (`make bench BASE={results['base_ref']}"
                    f"{quick}`)", "",
             f"Run on {time.strftime('%Y-%m-%d %H:%M', time.gmtime(results['started']))} UTC in "
             f"{results['seconds'] / 60:.1f} minutes: per database, {results['pairs']['inproc']} pairs of parts 1–3 "
             f"(`benchmarks/ab_inproc.py`, one run a process) and {results['pairs']['cluster']} of parts 4–5 "
             "(`benchmarks/cluster.py`, throughput and latency" + (", one run each" if quick else ", the median of "
             "its three runs") + "), HEAD and the base alternating which goes first. Both sides run HEAD's "
             "benchmark code, the base with only its own package (its own virtualenv, same dependency versions) "
             "on the path, against databases of its own migrated by its own migrations. Cells: median (min–max) "
             "over the pairs; the ratio is taken pair by pair. For µs and ms, a ratio below 1 is HEAD faster; "
             "for workflows/s, above 1. \"HEAD better\" or \"worse\" only when every pair agrees.", ""]
    if results["quick"]:
        lines += ["QUICK run: small counts and two pairs: it shows the comparison works, not what the "
                  "figures are.", ""]
    for name, runs in results["backends"].items():
        lines += backend_lines(name, runs)
    for what, why in results["failed"].items():
        lines.append(f"- **{what} not measured**: {why}")
    return [*lines, "", END]


def history_entry(results: dict) -> dict:
    """Every pair's figures: the ratios can be taken again, or other summaries made, from the history."""
    return {"commit": results["head"], "base": results["base"],
            "date": time.strftime("%Y-%m-%d", time.gmtime(results["started"])), "quick": results["quick"],
            "ab": results["backends"]}


def history_lines(history: list[dict]) -> list[str]:
    """The A/B runs of the history: each one's headline ratios."""
    entries = [e for e in history if "ab" in e]
    if not entries:
        return []
    keys = [f for f in FIGURES if f.key in ("step_us", "public_us", "three_rate", "throughput", "event_p99")]
    columns = [(b, f) for b in BACKENDS for f in keys]
    lines = ["### A/B runs in the history (HEAD ÷ base, median over the pairs)", "",
             "| date | HEAD | base | " + " | ".join(f"{BACKENDS[b]}: {f.label}" for b, f in columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for entry in entries:
        cells = []
        for backend, figure in columns:
            pair_ratios = ratios(entry["ab"].get(backend, {}).get(figure.kind, []), figure)
            cells.append(f"{statistics.median(pair_ratios):.2f}×" if pair_ratios else "—")
        quick = " (QUICK)" if entry.get("quick") else ""
        lines.append(f"| {entry['date']} | {entry['commit']}{quick} | {entry['base']} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def section(out_dir: Path) -> list[str]:
    """The last A/B run's section (``AB.md``), for a full run's ``REPORT.md``."""
    path = out_dir / "AB.md"
    return [*path.read_text().rstrip("\n").split("\n"), ""] if path.exists() else []


def write(results: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    history_path = out_dir / "history.json"
    history = json.loads(history_path.read_text()) if history_path.exists() else []
    history.append(history_entry(results))
    history_path.write_text(json.dumps(history, indent=1, ensure_ascii=False) + "\n")
    lines = markdown(results)
    lines[-1:-1] = history_lines(history)
    text = "\n".join(lines) + "\n"
    (out_dir / "AB.md").write_text(text)
    report = out_dir / "REPORT.md"
    old = report.read_text() if report.exists() else ""
    if START in old and END in old:
        new = old[:old.index(START)] + text.rstrip("\n") + old[old.index(END) + len(END):]
    elif "## How it was measured" in old:
        at = old.index("## How it was measured")
        new = old[:at] + text + "\n" + old[at:]
    else:
        new = old + ("\n" if old else "") + text
    report.write_text(new)
    print(text)
    print(f"wrote {out_dir / 'AB.md'}, its section of {report} and {history_path}")
