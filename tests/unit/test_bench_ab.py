"""``make bench BASE=...``'s report: ratios HEAD ÷ base taken pair by pair, their spread, the pairs kept in
the history, and its section of REPORT.md replaced, not repeated, by the next A/B run."""

import json

from benchmarks import ab_report, history


def pair(first: str, head: dict, base: dict) -> dict:
    return {"first": first, "HEAD": head, "base": base}


def results(step_head: tuple, step_base: tuple) -> dict:
    inproc = [pair("HEAD", {"step_us": step_head[0], "three_rate": 800.0}, {"step_us": step_base[0], "three_rate": 400.0}),
              pair("base", {"step_us": step_head[1], "three_rate": 900.0}, {"step_us": step_base[1], "three_rate": 450.0})]
    cluster = [pair("HEAD", {"event_p99": 30.0}, {"event_p99": 20.0})]
    return {"head": "aaaaaaa", "base": "bbbbbbb", "base_ref": "main~1", "quick": True, "started": 1_796_400_000,
            "seconds": 90.0, "pairs": {"inproc": 2, "cluster": 1},
            "backends": {"sqlite": {"inproc": inproc, "cluster": cluster}}, "failed": {}}


def row(lines: list[str], label: str) -> list[str]:
    line = next(line for line in lines if line.startswith(f"| ") and f" {label} |" in line)
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_each_ratio_is_taken_pair_by_pair_with_its_spread_and_judged_only_when_every_pair_agrees():
    lines = ab_report.markdown(results((100.0, 90.0), (200.0, 60.0)))
    step = row(lines, "1,000-step workflow, replay(), µs per step")
    # Pairs: 100/200 = 0.5 and 90/60 = 1.5: the median 1.0, and a spread that holds 1.
    assert step[2:] == ["95.0 (90.0–100)", "130 (60.0–200)", "1.00× (0.50–1.50)", "within the spread"]
    three = row(lines, "3-step workflows/s, sequential create() (inline)")
    assert three[4:] == ["2.00× (2.00–2.00)", "HEAD better"]  # more workflows/s is better
    event = row(lines, "event → resume, p99")
    assert event[4:] == ["1.50×", "HEAD worse"]  # more milliseconds is worse
    assert row(lines, "INSERT + COMMIT, the driver alone (the reference, no package in it), µs")[2:4] == [
        "not measured", "not measured"]


def test_the_pairs_go_to_the_history_and_the_report_keeps_one_ab_section(tmp_path):
    (tmp_path / "REPORT.md").write_text("# Benchmarks\n\n| table |\n\n## How it was measured\n\nText.\n")
    ab_report.write(results((100.0, 90.0), (200.0, 60.0)), tmp_path)
    ab_report.write(results((50.0, 50.0), (100.0, 100.0)), tmp_path)
    report = (tmp_path / "REPORT.md").read_text()
    assert report.count(ab_report.START) == 1 and report.count(ab_report.END) == 1
    assert report.index(ab_report.START) < report.index("## How it was measured")
    assert "0.50× (0.50–0.50)" in report and "1.00× (0.50–1.50)" not in report.split("### A/B runs")[0]
    past = json.loads((tmp_path / "history.json").read_text())
    assert [entry["ab"]["sqlite"]["inproc"][1]["base"]["step_us"] for entry in past] == [60.0, 100.0]
    assert (tmp_path / "AB.md").read_text() in report
    # The full runs' table and chart leave the A/B entries out.
    assert history.markdown(past) == []


def test_counts_show_whole_and_equal_counts_are_the_same():
    counted = results((100.0, 90.0), (100.0, 90.0))
    for p in counted["backends"]["sqlite"]["inproc"]:
        p["HEAD"]["three_commits"] = p["base"]["three_commits"] = 6
    cells = row(ab_report.markdown(counted), "… commits of one")
    assert cells[2:] == ["6 (6–6)", "6 (6–6)", "1.00× (1.00–1.00)", "the same"]
