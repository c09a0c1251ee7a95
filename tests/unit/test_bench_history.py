"""The benchmarks' history: each full run's headline figures recorded per commit, marked against goals."""

import json

from benchmarks import history


def results(step_us: float, ratio: float, quick: bool = False) -> dict:
    return {"quick": quick, "started": 1_796_400_000,
            "configs": {"sqlite": {"step": {"us": {"median": step_us}}, "public": {"ratio": {"median": ratio}}},
                        "postgres-orm": {"throughput": {"rate": {"median": 310.0}}}}}


def test_each_full_run_is_recorded_with_its_commit_and_marked_against_the_goals(tmp_path):
    history.record(results(120.0, 2.5), tmp_path)
    past = history.record(results(90.0, 1.8), tmp_path)
    assert [entry["figures"]["SQLite step, µs"] for entry in past] == [120.0, 90.0]
    assert json.loads((tmp_path / "history.json").read_text()) == past
    assert all(entry["commit"] for entry in past)
    table = history.markdown(past)
    header = next(line for line in table if line.startswith("| commit"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table if line.startswith("| ")][1:]
    ratio = columns.index("SQLite step through create() ÷ driver")
    throughput = columns.index("cluster, PostgreSQL ORM broker, workflows/s")
    assert [row[ratio] for row in rows] == ["2.50 ✗", "1.80 ✓"]
    assert [row[throughput] for row in rows] == ["310 ✓", "310 ✓"]
    assert rows[0][columns.index("PostgreSQL step, µs")] == "—"


def test_the_report_carries_the_scale_runs_figures_down_to_its_verdict(tmp_path):
    from benchmarks.report import scale_summary

    scale = tmp_path / "SCALE.md"
    assert scale_summary(scale) == []
    scale.write_text("# Scale\n\nLoaded 1,000,000.\n\n| path | p99 |\n|---|---|\n| admin | 81 |\n\n"
                     "### An idle worker on the million\n\n| CPU | 0.5% |\n\nEvery goal met.\n\n"
                     "## The plans' key lines\n\n- Index Scan\n")
    lines = scale_summary(scale)
    text = "\n".join(lines)
    assert lines[0].startswith("## Scale")
    assert "| admin | 81 |" in text and "#### An idle worker on the million" in text
    assert "Every goal met." in text and "Index Scan" not in text and "# Scale\n" not in text
