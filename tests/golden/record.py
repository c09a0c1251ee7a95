"""Record the golden journals of this release: run each scenario's instances of the golden workflows
(tests/testapp/golden.py) to a point mid-flight, read their rows as stored, then carry on to their end
and note what happens and how each ends. ``tests/integration/test_golden_journals.py`` replays them with
the code of every later release.

Run it from the repository's root, on SQLite (PostgreSQL's jsonb re-encodes the JSON text the engine
writes, and the point is to keep that text as written)::

    env -u DATABASE_URL DJANGO_SETTINGS_MODULE=tests.settings python -m tests.golden.record --label <label>

It writes ``tests/golden/<version>-<label>/`` (the version is ``django_workflows.__version__``; the
label tells recordings of one version apart, the date of the recording by default), one file per
scenario, in a test database of its own that it creates and destroys. Record once per release, and
commit the directory; never record an older release's directory again (``tests/golden/__init__.py``).
``--scenario NAME`` records only that one (repeatable); ``--replace`` lets a directory of this release
that has not been committed yet be written again.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPOSITORY = str(Path(__file__).resolve().parent.parent.parent)
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
"""Every scenario begins at this time of the test clock, so that a recording is the same each time but
for the times the step bodies took."""


def _send(instance_id: str, workflow: str, type_: str, payload=None) -> dict:
    return {"send": {"workflow": workflow, "instance": instance_id, "type": type_, "payload": payload}}


def _at(moment: datetime) -> float:
    return moment.timestamp()


# The scenarios: each starts its instances and takes them mid-flight with the test environment ``env``,
# and returns what happens to them afterwards (the ``later`` of journals.py). Its docstring says what
# its journals hold.

def json_shapes(env, workflows):
    """Results of many JSON shapes (unicode, escapes, big integers, tiny floats, nesting, empties, a tuple
    journaled as a list); a sleep and a sleep_until. One instance complete, one in its sleep."""
    shapes = workflows.get("golden-shapes")
    shapes.create(id="complete", params={"alarm_at": _at(env.now + timedelta(hours=2))})
    env.run_until_idle()
    env.advance("2 hours")
    shapes.create(id="sleeping", params={"alarm_at": _at(env.now + timedelta(hours=2))})
    env.run_until_idle()
    return [{"advance": "2 hours"}]


def retries(env, workflows):
    """A step retried with exponential backoff, its failed attempts journaled, still to succeed; one that
    failed for good, caught by run(), which fell back; a NonRetryableError caught."""
    retried = workflows.get("golden-retries")
    retried.create(id="recovering", params={"failures": 3, "retries": 4})
    retried.create(id="gave-up", params={"failures": 9, "retries": 1})
    env.run_until_idle()
    env.advance("1 minute")
    return [{"advance": "10 minutes"}]


def approvals(env, workflows):
    """Waits for events: one that timed out (72 hours); one that found its decision already in the inbox,
    consumed it, and sleeps with the next event (the receipt) buffered; one still waiting; one rejected
    by an event of the other type of its wait."""
    approval = workflows.get("golden-approval")
    approval.create(id="expired", params={"approver": "ada"})
    env.run_until_idle()
    env.advance("72 hours")
    early = approval.create(id="early", params={"approver": "grace"})
    early.send_event(type="approve", payload={"by": "grace", "amount": 120})
    env.run_until_idle()
    early.send_event(type="receipt", payload={"number": "R-1", "lines": [{"sku": "tea", "qty": 2}]})
    env.run_until_idle()
    approval.create(id="pending", params={"approver": "alan"})
    rejected = approval.create(id="rejected", params={"approver": "edsger"})
    env.run_until_idle()
    rejected.send_event(type="reject", payload="over budget")
    env.run_until_idle()
    return [_send("pending", "golden-approval", "approve", {"by": "alan", "amount": 80}),
            {"advance": "1 hour"},
            _send("pending", "golden-approval", "receipt", {"number": "R-2", "lines": []}),
            {"advance": "1 hour"}]


def children(env, workflows):
    """Child workflows: a child that failed, its error caught by its parent, which then completed; a
    child that completed, its end consumed from the parent's inbox, the parent resting; a child waiting
    for an event, its parent waiting for its end."""
    from django_workflows.models import Instance

    parent = workflows.get("golden-parent")
    parent.create(id="caught", params={"kid": {"n": 1, "fail": True}})
    env.run_until_idle()
    env.advance("1 hour")
    parent.create(id="resting", params={"kid": {"n": 21}})
    patient = parent.create(id="patient", params={"kid": {"n": 50, "wait": True}})
    env.run_until_idle()
    kid = Instance.objects.get(parent_id=patient.pk)
    return [_send(kid.instance_id, "golden-kid", "go", {"at": "once"}), {"advance": "1 hour"}]


def rollbacks(env, workflows):
    """Undos: one instance errored, run() having let the failure out, its undos run by the engine; one
    whose run() called rollback_all, mid-rollback, the refund retrying while the payment provider is
    down."""
    saga = workflows.get("golden-saga")
    saga.create(id="errored", params={"compensate": False, "provider_down_until": START.isoformat()})
    saga.create(id="compensating", params={
        "compensate": True, "provider_down_until": (env.now + timedelta(seconds=150)).isoformat()})
    env.run_until_idle()
    env.advance("1 minute")
    return [{"advance": "5 minutes"}]


def patches(env, workflows):
    """step.patched: an instance begun on the code before the change, past the patch's point (no marker,
    and it must keep to the old path), and one begun after it (its marker journaled); both waiting for
    the parcel to ship."""
    from django_workflows import WorkflowEntrypoint
    from django_workflows.definition import registry
    from tests.testapp.golden import counted

    class ParcelBeforeInsurance(WorkflowEntrypoint):
        """golden-parcel as it was deployed before the insurance: the same steps, no step.patched."""

        name = "golden-parcel"

        def run(self, event, step):
            step.do("pack", counted(event, {"parcel": event.instance_id}))
            shipped = step.wait_for_event("shipped", "shipped", timeout="7 days")
            step.do("deliver", counted(event, {"tracking": shipped.payload["tracking"]}))
            return {"insured": False, "tracking": shipped.payload["tracking"]}

    parcel = workflows.get("golden-parcel")
    try:
        parcel.create(id="before-the-change", params={"to": "Lyon"})
        env.run_until_idle()
    finally:
        registry.unregister(ParcelBeforeInsurance)  # the change is deployed
    env.advance("1 hour")
    parcel.create(id="after-the-change", params={"to": "Nantes"})
    env.run_until_idle()
    return [_send("before-the-change", "golden-parcel", "shipped", {"tracking": "TRK-1"}),
            _send("after-the-change", "golden-parcel", "shipped", {"tracking": "TRK-2"})]


def side_by_side(env, workflows):
    """Concurrent steps and atomic steps: step.all with one quote retrying; an async run() that gathered
    two steps and sleeps, and one that went on to steps declared as functions (one taking the others'
    results, run side by side) and an atomic step, and completed."""
    workflows.get("golden-async").create(id="complete")
    env.run_until_idle()
    env.advance("1 hour")
    workflows.get("golden-async").create(id="napping")
    workflows.get("golden-fan-out").create(id="retrying")
    env.run_until_idle()
    return [{"advance": "1 hour"}]


SCENARIOS = {scenario.__name__.replace("_", "-"): scenario
             for scenario in (json_shapes, retries, approvals, children, rollbacks, patches, side_by_side)}


def record(name: str, scenario) -> dict:
    """Run ``scenario`` from an empty database; return what its file holds."""
    from django_workflows import __version__, workflows
    from django_workflows.models import Instance
    from django_workflows.testing import run_workflows
    from tests.golden import journals
    from tests.testapp.workflows import calls

    Instance.objects.all().delete()  # with their steps and events
    calls.clear()
    with run_workflows(start=START) as env:
        later = scenario(env, workflows)
        rows = journals.dump_rows()
        for row in rows["instance"]:
            # A traceback names files by the path of the checkout that recorded it; no replay reads it.
            row["traceback"] = row["traceback"].replace(f"{REPOSITORY}/", "")
        clock = env.now
        calls.clear()
        journals.run_later(later, env)
        expected = journals.ends()
    bodies = sorted([instance_id, key, runs] for (instance_id, key), runs in calls.items())
    unfinished = [key for key, end in expected.items() if end["status"] not in ("complete", "errored")]
    if unfinished:
        raise RuntimeError(f"scenario {name}: {unfinished} did not end; its later actions must end every "
                           "instance")
    return {"scenario": name, "covers": " ".join(scenario.__doc__.split()), "release": __version__,
            "recorded_on": "sqlite", "clock": clock.isoformat(), "later": later, "expected": expected,
            "bodies_run_later": bodies, "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.record",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default=datetime.now(UTC).date().isoformat(),
                        help="tells recordings of one version apart (default: today's date)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only this one")
    parser.add_argument("--replace", action="store_true",
                        help="write over this release's directory (only before it is committed)")
    options = parser.parse_args(argv)

    import django

    django.setup()
    # The scenarios fail steps and instances on purpose: the engine's log of each says nothing new here.
    logging.getLogger("django_workflows").setLevel(logging.CRITICAL)
    from django.db import connection

    from django_workflows import __version__
    from tests.golden import journals

    if connection.vendor != "sqlite":
        parser.error("record on SQLite (unset DATABASE_URL): PostgreSQL's jsonb re-encodes the journal's "
                     "JSON text")
    directory = journals.GOLDEN / f"{__version__}-{options.label}"
    if directory.exists() and not options.replace:
        parser.error(f"{directory} exists; a release's journals are recorded once (--replace before "
                     "committing)")
    names = options.scenario or sorted(SCENARIOS)
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        recorded = {name: record(name, SCENARIOS[name]) for name in names}
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    if options.replace and not options.scenario:
        shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    for name, scenario in recorded.items():
        journals.write(directory / f"{name}.json", scenario)
        print(f"{directory.relative_to(journals.GOLDEN.parent.parent)}/{name}.json: "
              f"{len(scenario['rows']['instance'])} instances, {len(scenario['rows']['step'])} steps, "
              f"{len(scenario['rows']['event'])} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
