"""What one 3-step workflow costs through ``create()`` on the inline executor, counted as the database
sees it: the INSERT that takes the replay's lease, three fenced journal rows, and the release that
completes the instance, in four commits (the last step's row commits with the end, run() returning
straight after it; on PostgreSQL in one statement); and that a step's row is still written before any more of run()'s code runs."""

import sys
from collections import Counter

import pytest
from benchmarks import statements
from django.db import connection
from django_workflows import workflows
from django_workflows.engine import step_rows
from django_workflows.models import Instance, Step
from tests.testapp.workflows import calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("inline_executor")]


def _count(run):
    """Call ``run()``; return (statements by verb, commits), counted as the benchmark's report counts
    them: the connection's own commits, and every write made in autocommit."""
    counted = statements.count(run)
    return Counter(counted["by_verb"]), counted["commits"]


def _others():
    """The instances a count would meet: a queued one of higher priority is taken first (and costs the
    lease's UPDATE)."""
    return list(Instance.objects.values_list("workflow_name", "instance_id", "status", "queue", "priority"))


def test_a_3_step_workflow_through_create_is_five_writes_in_four_commits():
    assert _others() == []
    workflows.get("returns-its-last-step").create(id="warm-up")  # the clock's first reading, if any
    verbs, commits = _count(lambda: workflows.get("returns-its-last-step").create(id="counted"))
    instance = Instance.objects.get(instance_id="counted")
    assert instance.status == "complete" and instance.lease_owner == "" and instance.epoch == 1
    assert Step.objects.filter(instance=instance, status="succeeded").count() == 3
    writes = {verb: n for verb, n in verbs.items() if verb not in ("BEGIN", "COMMIT")}
    # The instance's INSERT, three journal INSERTs, the completing UPDATE: no UPDATE takes the lease.
    # On PostgreSQL the last row and the completing UPDATE are one statement (a data-modifying WITH),
    # committed alone: no BEGIN, no COMMIT of their own.
    if connection.vendor == "postgresql":
        assert writes == {"INSERT": 3, "WITH": 1}, verbs
        assert "BEGIN" not in verbs and "COMMIT" not in verbs, verbs
    else:
        assert writes == {"INSERT": 4, "UPDATE": 1}, verbs
    assert commits == 4, verbs
    assert instance.output == 3 and Counter(calls) == {"a": 2, "b": 2, "c": 2}


def test_run_that_goes_on_after_its_last_step_finds_that_step_journaled():
    assert _others() == []
    handle = workflows.get("looks-after-its-last-step").create(id="looks")
    assert handle.status()["output"] == {"b": 2, "journaled": ["a-1", "b-1"]}
    verbs, commits = _count(lambda: workflows.get("looks-after-its-last-step").create(id="counted"))
    # Its last step's row is written before run() reads the journal: a commit of its own.
    assert commits == 4, verbs


def test_a_long_replay_watches_for_its_kept_rows_only_while_that_can_pay(monkeypatch):
    """The profile function that lets a kept row wait for the next call costs each step it watches, and
    saves at most one commit a replay: past WATCHED_STEPS steps, each row is written as its step returns.
    Every row is written either way, each before run() goes on."""
    installed = []
    setprofile = sys.setprofile

    def counting(function):
        if function is not None:
            installed.append(function)
        setprofile(function)

    monkeypatch.setattr(sys, "setprofile", counting)
    watched = step_rows.WATCHED_STEPS.get(connection.vendor, step_rows.WATCHED_STEPS_ELSEWHERE)
    handle = workflows.get("loop").create(id="long", params={"n": watched + 5})
    monkeypatch.setattr(sys, "setprofile", setprofile)
    assert handle.status()["output"] == sum(range(watched + 5))
    assert len(installed) == watched
    assert Step.objects.filter(instance__instance_id="long", status="succeeded").count() == watched + 5
