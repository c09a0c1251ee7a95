"""Golden journals: the rows of half-run instances written by an earlier release (tests/golden/<release>/,
recorded by tests/golden/record.py) are loaded as they were stored, and today's code drives every
instance to its end. Each ends as it did under the release that wrote it; no step the journal had
finished runs again; no replay finds its journal at odds with the code (NonDeterminismError)."""

from __future__ import annotations

from datetime import datetime

import pytest

from django_workflows.models import FINISHED_STATUSES, Instance
from django_workflows.testing import run_workflows, verify_journal
from tests.golden import journals
from tests.testapp.workflows import calls

SCENARIOS = journals.scenario_files()
# A finished step, in the words of the rows: what the recording release stored, whatever today's
# StepStatus says.
FINISHED_STEP = ("succeeded", "failed")


def test_the_journals_of_this_release_are_recorded():
    """Every release leaves its journals for the later ones: tests/golden/record.py, once per release."""
    from django_workflows import __version__

    releases = [directory.name for directory in journals.release_directories()]
    assert any(name.startswith(f"{__version__}-") for name in releases), (
        f"no golden journals of release {__version__} in {releases}: record them (tests/golden/record.py)")


@pytest.mark.parametrize("path", SCENARIOS, ids=[f"{path.parent.name}/{path.stem}" for path in SCENARIOS])
def test_an_earlier_release_s_instances_run_to_their_end(db, path):
    scenario = journals.read(path)
    rows = scenario["rows"]
    journals.load_rows(rows)

    # Before anything runs: today's code agrees with every journal still to be run.
    unfinished = Instance.objects.exclude(status__in=FINISHED_STATUSES)
    assert unfinished, f"{path.name}: the scenario has no instance mid-flight, and proves nothing"
    divergences = [divergence for instance in unfinished if (divergence := verify_journal(instance))]
    assert not divergences, f"today's code cannot go on with these journals: {divergences}"

    with run_workflows(start=datetime.fromisoformat(scenario["clock"])) as env:
        journals.run_later(scenario["later"], env)

    ends = journals.ends()
    non_deterministic = {key: end["error"] for key, end in ends.items()
                         if (end["error"] or {}).get("name") == "NonDeterminismError"}
    assert not non_deterministic, (
        f"replays found their journals at odds with today's code: {non_deterministic}")

    instance_ids = {row["id"]: row["instance_id"] for row in rows["instance"]}
    finished = {(instance_ids[row["instance_id"]], row["key"]) for row in rows["step"]
                if row["status"] in FINISHED_STEP}
    ran = {body: runs for body, runs in calls.items() if isinstance(body, tuple)}
    ran_again = sorted(body for body in ran if body in finished)
    assert not ran_again, f"steps the journal had finished ran again: {ran_again}"
    assert ran == {(instance_id, key): runs for instance_id, key, runs in scenario["bodies_run_later"]}

    assert ends == scenario["expected"]
