"""Versions of instances, and ``step.patched``: a workflow's code changed under instances that already
began, the old ones keeping to the old path and the new ones taking the new, deterministically on every
later replay; ``workflows verify`` agrees; the version is shown in the API, the CLI and the admin."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections import Counter

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import override_settings
from rest_framework.test import APIClient

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.surfaces import checks
from django_workflows.shared.definition import registry
from django_workflows.errors import WorkflowConfigError
from django_workflows.models import Instance, Step, StepKind
from django_workflows.testing import verify_journal

calls: Counter = Counter()


def effect(name):
    def body():
        calls[name] += 1
        return name
    return body


# -- one workflow, deployed in versions ---------------------------------------------------------------
#
# v1 reserves, cools off for an hour, charges, waits for the parcel to ship and closes. v2 adds a fraud
# check before the cool-off and a receipt after it, each guarded by step.patched. Each has a def run and
# an async def run twin; the async v2 calls its patched while a step it called is still unsettled.

class OrderV1(WorkflowEntrypoint):
    name = "order-flow"
    version = "1"

    def run(self, event, step):
        step.do("reserve", effect("reserve"))
        step.sleep("cool-off", "1 hour")
        step.do("charge", effect("charge"))
        step.wait_for_event("shipped", "shipped", timeout="7 days")
        step.do("close", effect("close"))
        return {}


class OrderV2(WorkflowEntrypoint):
    name = "order-flow"
    version = "2"

    def run(self, event, step):
        taken = {}
        step.do("reserve", effect("reserve"))
        taken["fraud-check"] = step.patched("fraud-check")
        if taken["fraud-check"]:
            step.do("check for fraud", effect("check for fraud"))
        step.sleep("cool-off", "1 hour")
        taken["receipt"] = step.patched("receipt")
        if taken["receipt"]:
            step.do("send receipt", effect("send receipt"))
        step.do("charge", effect("charge"))
        step.wait_for_event("shipped", "shipped", timeout="7 days")
        taken["receipt again"] = step.patched("receipt")
        step.do("close", effect("close"))
        return taken


class AsyncOrderV1(WorkflowEntrypoint):
    name = "async-order-flow"
    version = "1"

    async def run(self, event, step):
        await step.do("reserve", effect("reserve"))
        await step.sleep("cool-off", "1 hour")
        await step.do("charge", effect("charge"))
        await step.wait_for_event("shipped", "shipped", timeout="7 days")
        await step.do("close", effect("close"))
        return {}


class AsyncOrderV2(WorkflowEntrypoint):
    name = "async-order-flow"
    version = "2"

    async def run(self, event, step):
        taken = {}
        reserve = step.do("reserve", effect("reserve"))  # called, not settled yet
        taken["fraud-check"] = step.patched("fraud-check")
        if taken["fraud-check"]:
            await asyncio.gather(reserve, step.do("check for fraud", effect("check for fraud")))
        else:
            await reserve
        await step.sleep("cool-off", "1 hour")
        taken["receipt"] = step.patched("receipt")
        if taken["receipt"]:
            await step.do("send receipt", effect("send receipt"))
        await step.do("charge", effect("charge"))
        await step.wait_for_event("shipped", "shipped", timeout="7 days")
        taken["receipt again"] = step.patched("receipt")
        await step.do("close", effect("close"))
        return taken


class OrderV2Unguarded(WorkflowEntrypoint):
    """v2 as it should not be deployed: the fraud check added without step.patched."""

    name = "order-flow"

    def run(self, event, step):
        step.do("reserve", effect("reserve"))
        step.do("check for fraud", effect("check for fraud"))
        step.sleep("cool-off", "1 hour")
        step.do("charge", effect("charge"))
        step.wait_for_event("shipped", "shipped", timeout="7 days")
        step.do("close", effect("close"))
        return {}


class OrderV2Moved(WorkflowEntrypoint):
    """v2 with its first patched call moved before the step it followed."""

    name = "order-flow"

    def run(self, event, step):
        fraud_check = step.patched("fraud-check")
        step.do("reserve", effect("reserve"))
        if fraud_check:
            step.do("check for fraud", effect("check for fraud"))
        step.sleep("cool-off", "1 hour")
        return {}


class OrderV3(WorkflowEntrypoint):
    """Every instance still running took the fraud check: its patch is deprecated."""

    name = "order-flow"
    version = "3"

    def run(self, event, step):
        step.do("reserve", effect("reserve"))
        step.deprecate_patch("fraud-check")
        step.do("check for fraud", effect("check for fraud"))
        return after_the_fraud_check(step, 3)


class OrderV4(WorkflowEntrypoint):
    """The deprecated patch removed."""

    name = "order-flow"
    version = "4"

    def run(self, event, step):
        step.do("reserve", effect("reserve"))
        step.do("check for fraud", effect("check for fraud"))
        return after_the_fraud_check(step, 4)


def after_the_fraud_check(step, version):
    step.sleep("cool-off", "1 hour")
    receipt = step.patched("receipt")
    if receipt:
        step.do("send receipt", effect("send receipt"))
    step.do("charge", effect("charge"))
    step.wait_for_event("shipped", "shipped", timeout="7 days")
    step.do("close", effect("close"))
    return {"v": version, "receipt": receipt}


class Unversioned(WorkflowEntrypoint):
    name = "unversioned-flow"

    def run(self, event, step):
        return step.do("only", effect("only"))


class Limited(WorkflowEntrypoint):
    name = "limited-patched-flow"
    step_limit = 2

    def run(self, event, step):
        step.do("first", effect("first"))
        patched = step.patched("extra")
        step.do("second", effect("second"))
        return patched


class AsyncPatchAtTheEnd(WorkflowEntrypoint):
    name = "async-patch-at-the-end"

    async def run(self, event, step):
        await step.do("first", effect("first"))
        return step.patched("tail")


class BadChangeId(WorkflowEntrypoint):
    name = "bad-change-id"

    def run(self, event, step):
        return step.patched(event.payload["id"])


DEPLOYABLE = (OrderV1, OrderV2, AsyncOrderV1, AsyncOrderV2, OrderV2Unguarded, OrderV2Moved, OrderV3, OrderV4,
              Unversioned, Limited, AsyncPatchAtTheEnd, BadChangeId)
for _cls in DEPLOYABLE:
    registry.unregister(_cls)

FLAVOURS = {"sync": ("order-flow", OrderV1, OrderV2), "async": ("async-order-flow", AsyncOrderV1, AsyncOrderV2)}


@pytest.fixture
def deploy():
    """``deploy(cls)``: the code of the workflow of that name becomes ``cls``, as a deploy replaces it
    under the instances that already began."""
    calls.clear()

    def to(*classes):
        for cls in classes:
            for other in DEPLOYABLE:
                if other.name == cls.name:
                    registry.unregister(other)
            registry.register(cls)

    yield to
    for cls in DEPLOYABLE:
        registry.unregister(cls)
    calls.clear()


def row(instance) -> Instance:
    return Instance.objects.get(pk=instance.pk)


def markers(instance) -> list[tuple[str, str, dict]]:
    return list(Step.objects.filter(instance_id=instance.pk, kind=StepKind.PATCH).order_by("id")
                .values_list("key", "name", "result"))


def journal_keys(instance) -> list[str]:
    return list(Step.objects.journal_of(row(instance)).values_list("key", flat=True))


def ship(env, instance):
    instance.send_event(type="shipped", payload={})
    env.run_until_idle()


# -- versions recorded at create -----------------------------------------------------------------------

def test_the_version_is_the_class_attribute_else_the_setting_else_none(workflows_env, deploy, settings):
    deploy(OrderV1, Unversioned)
    assert row(workflows.get("order-flow").create(id="v1")).version == "1"
    assert row(workflows.get("unversioned-flow").create(id="none")).version == ""
    settings.DJANGO_WORKFLOWS = {"VERSION": "2025.06.1"}
    assert row(workflows.get("unversioned-flow").create(id="deployed")).version == "2025.06.1"
    # The class's own version says more about its code than the deploy's: it wins.
    assert row(workflows.get("order-flow").create(id="own")).version == "1"
    [batched] = workflows.get("unversioned-flow").create_batch([{"id": "batched"}])
    assert row(batched).version == "2025.06.1"


def test_a_whole_number_version_is_recorded_as_text_and_a_bad_one_is_refused(workflows_env, deploy, settings):
    deploy(Unversioned)
    settings.DJANGO_WORKFLOWS = {"VERSION": 7}
    assert row(workflows.get("unversioned-flow").create(id="seven")).version == "7"
    assert [m.id for m in checks.check_settings() if m.id == "django_workflows.E020"] == []
    settings.DJANGO_WORKFLOWS = {"VERSION": "x" * 101}
    with pytest.raises(WorkflowConfigError, match="VERSION"):
        workflows.get("unversioned-flow").create(id="too-long")
    assert not Instance.objects.filter(instance_id="too-long").exists()
    assert [m.id for m in checks.check_settings() if m.id == "django_workflows.E020"] == ["django_workflows.E020"]

    class BadVersion(WorkflowEntrypoint):
        version = "line\nbreak"

        def run(self, event, step):
            return None

    try:
        assert "django_workflows.E020" in [m.id for m in checks.check_workflows()]
    finally:
        registry.unregister(BadVersion)


def test_an_instance_inserted_without_the_version_column_runs(workflows_env, deploy):
    """During a rolling deploy, a worker of the previous release inserts instances without the
    column (the benchmarks' bulk insert too): the database's default fills it."""
    deploy(OrderV2)
    stamp = connection.ops.adapt_datetimefield_value(workflows_env.now)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_workflows_instance (workflow_name, instance_id, status, traceback, "
            "current_step, lease_owner, epoch, crash_count, created_at, updated_at) "
            "VALUES ('order-flow', 'old-release', 'queued', '', '', '', 0, 0, %s, %s)",
            [stamp, stamp],
        )
    instance = workflows.get("order-flow").get("old-release")
    assert row(instance).version == ""
    workflows_env.executor.enqueue_replay(instance.pk)
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    ship(workflows_env, instance)
    assert instance.status()["status"] == "complete"
    assert instance.status()["output"] == {"fraud-check": True, "receipt": True, "receipt again": True}


# -- step.patched across a deploy ------------------------------------------------------------------------

@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_old_instance_keeps_to_the_old_path_where_it_had_passed_the_patch(workflows_env, deploy, flavour):
    name, v1, v2 = FLAVOURS[flavour]
    deploy(v1)
    instance = workflows.get(name).create(id="passed-both")
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    assert row(instance).current_step == "shipped-1"  # past both points the patches guard
    deploy(v2)
    assert verify_journal(instance) is None
    ship(workflows_env, instance)
    assert instance.status()["output"] == {"fraud-check": False, "receipt": False, "receipt again": False}
    assert calls == Counter({"reserve": 1, "charge": 1, "close": 1})
    assert markers(instance) == []
    assert row(instance).version == "1"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_across_a_deploy_an_old_instance_takes_the_old_path_and_a_new_one_the_new(workflows_env, deploy, flavour):
    name, v1, v2 = FLAVOURS[flavour]
    deploy(v1)
    old = workflows.get(name).create(id="began-on-v1")
    workflows_env.run_until_idle()
    assert (row(old).status, row(old).current_step) == ("waiting", "cool-off-1")
    assert journal_keys(old) == ["reserve-1", "cool-off-1"]

    deploy(v2)
    new = workflows.get(name).create(id="began-on-v2")
    workflows_env.run_until_idle()
    assert (row(old).version, row(new).version) == ("1", "2")
    # The new instance took the fraud check; its marker stands between reserve and the check.
    assert journal_keys(new) == ["patched(fraud-check)", "reserve-1", "check for fraud-1", "cool-off-1"] \
        if flavour == "async" else ["reserve-1", "patched(fraud-check)", "check for fraud-1", "cool-off-1"]
    assert markers(new) == [("patched(fraud-check)", "fraud-check", {"patched": True, "after_steps": 1})]
    # The old one is not replayed until its cool-off ends, and nothing was written to it.
    assert journal_keys(old) == ["reserve-1", "cool-off-1"]

    # Both wake after the hour: the old one had passed the fraud check's point, not the receipt's.
    workflows_env.advance("1 hour")
    assert [row(old).current_step, row(new).current_step] == ["shipped-1", "shipped-1"]
    assert markers(old) == [("patched(receipt)", "receipt", {"patched": True, "after_steps": 2})]
    assert [key for key, _, _ in markers(new)] == ["patched(fraud-check)", "patched(receipt)"]
    assert markers(new)[1][2] == {"patched": True, "after_steps": 3}
    assert calls == Counter({"reserve": 2, "check for fraud": 1, "send receipt": 2, "charge": 2})

    # A further suspension and replay: the same answers from the journal, no marker written again.
    ship(workflows_env, old)
    ship(workflows_env, new)
    assert old.status()["output"] == {"fraud-check": False, "receipt": True, "receipt again": True}
    assert new.status()["output"] == {"fraud-check": True, "receipt": True, "receipt again": True}
    assert len(markers(old)) == 1 and len(markers(new)) == 2
    assert calls == Counter({"reserve": 2, "check for fraud": 1, "send receipt": 2, "charge": 2, "close": 2})
    # Markers count toward no step: the old instance's steps stand where v1 journaled them.
    assert [key for key in journal_keys(old) if not key.startswith("patched(")] == [
        "reserve-1", "cool-off-1", "send receipt-1", "charge-1", "shipped-1", "close-1"]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_replay_of_a_patched_instance_gives_the_same_answers(workflows_env, deploy, flavour):
    name, _, v2 = FLAVOURS[flavour]
    deploy(v2)
    instance = workflows.get(name).create(id="replayed")
    workflows_env.run_until_idle()
    seen = [(journal_keys(instance), markers(instance))]
    # Replays that find nothing to do (a duplicate delivery, an early wake-up) write nothing.
    from django_workflows.engine.replay import replay

    for _ in range(3):
        Instance.objects.filter(pk=instance.pk).update(status="queued")
        replay(instance.pk)
        assert row(instance).status == "waiting"
        seen.append((journal_keys(instance), markers(instance)))
    assert all(entry == seen[0] for entry in seen)
    assert calls == Counter({"reserve": 1, "check for fraud": 1})


def test_an_unguarded_change_is_what_patched_saves_an_old_instance_from(workflows_env, deploy):
    deploy(OrderV1)
    old = workflows.get("order-flow").create(id="unguarded")
    workflows_env.run_until_idle()
    deploy(OrderV2Unguarded)
    workflows_env.advance("1 hour")
    error = row(old).error
    assert error["name"] == "NonDeterminismError" and "'check for fraud-1'" in error["message"]


def test_patched_moved_among_the_steps_is_a_non_determinism_error(workflows_env, deploy):
    deploy(OrderV2)
    instance = workflows.get("order-flow").create(id="moved")
    workflows_env.run_until_idle()
    deploy(OrderV2Moved)
    finding = verify_journal(instance)
    assert finding is not None and finding.error == "NonDeterminismError"
    workflows_env.advance("1 hour")
    error = row(instance).error
    assert error["name"] == "NonDeterminismError"
    assert "step.patched('fraud-check') was reached after 0 steps" in error["message"]
    assert "recorded it after 1" in error["message"]


def test_a_deprecated_patch_keeps_its_marker_and_then_goes(workflows_env, deploy):
    deploy(OrderV2)
    on_v2 = workflows.get("order-flow").create(id="on-v2")
    workflows_env.run_until_idle()
    deploy(OrderV3)
    on_v3 = workflows.get("order-flow").create(id="on-v3")
    workflows_env.run_until_idle()
    # deprecate_patch journals the marker for new instances, flagged so.
    [(key, _, result)] = markers(on_v3)
    assert key == "patched(fraud-check)" and result == {"patched": True, "after_steps": 1}
    assert Step.objects.get(instance_id=on_v3.pk, key=key).config == {"deprecated": True}
    # A worker still on v2 (a rolling deploy) takes the new path on an instance v3 began.
    deploy(OrderV2)
    assert verify_journal(on_v3) is None
    workflows_env.advance("1 hour")
    assert row(on_v3).current_step == "shipped-1" and row(on_v3).error is None
    # Once v4 drops the call, the journaled markers are passed over.
    deploy(OrderV4)
    assert verify_journal(on_v2) is None and verify_journal(on_v3) is None
    ship(workflows_env, on_v2)
    ship(workflows_env, on_v3)
    assert on_v2.status()["output"] == on_v3.status()["output"] == {"v": 4, "receipt": True}
    assert len(markers(on_v2)) == 2 and len(markers(on_v3)) == 2


def test_markers_do_not_count_toward_the_step_limit(workflows_env, deploy):
    deploy(Limited)
    instance = workflows.get("limited-patched-flow").create()
    workflows_env.run_until_idle()
    assert instance.status() == {"status": "complete", "output": True, "error": None}
    assert len(markers(instance)) == 1


def test_an_async_run_that_returns_right_after_patched_journals_its_marker(workflows_env, deploy):
    deploy(AsyncPatchAtTheEnd)
    instance = workflows.get("async-patch-at-the-end").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] is True
    assert markers(instance) == [("patched(tail)", "tail", {"patched": True, "after_steps": 1})]


@pytest.mark.parametrize("change_id", ["", "new\nline", "x" * 257, 42])
def test_a_change_id_follows_the_step_name_rule(workflows_env, deploy, change_id):
    deploy(BadChangeId)
    instance = workflows.get("bad-change-id").create(params={"id": change_id})
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "InvalidStepInput" and "a change id is a string of 1 to 256" in error["message"]
    assert markers(instance) == []


# -- workflows verify --------------------------------------------------------------------------------------

def verify_command(*args) -> tuple[int, str, str]:
    from django.core.management.base import CommandError

    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("workflows", "verify", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue() + str(exc)
    return 0, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_verify_passes_old_journals_against_code_that_guards_its_change_with_patched(workflows_env, deploy,
                                                                                    flavour):
    name, v1, v2 = FLAVOURS[flavour]
    deploy(v1)
    at_cool_off = workflows.get(name).create(id="at-cool-off")
    workflows_env.run_until_idle()
    shipped_wait = workflows.get(name).create(id="at-shipped")
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")  # both are now waiting for the parcel
    at_cool_off_now = workflows.get(name).create(id="at-cool-off-now")
    workflows_env.run_until_idle()
    # A replay cut off (its worker killed) just after it marked the cool-off over: run() reaches the
    # receipt's patch with nothing journaled beyond it, where a replay would journal its marker.
    Step.objects.filter(instance_id=at_cool_off_now.pk, key="cool-off-1").update(status="succeeded")
    deploy(v2)
    new = workflows.get(name).create(id="on-v2")
    workflows_env.run_until_idle()
    rows_before = Step.objects.count()

    code, out, err = verify_command(name, "--json")
    assert code == 0, (out, err)
    assert json.loads(out)["verified"] == 4 and json.loads(out)["diverged"] == []
    assert all(verify_journal(i) is None for i in (at_cool_off, shipped_wait, at_cool_off_now, new))
    # It wrote no marker for what it replayed.
    assert Step.objects.count() == rows_before
    assert markers(at_cool_off_now) == []


def test_verify_names_an_old_journal_the_unguarded_change_would_break(workflows_env, deploy):
    deploy(OrderV1)
    workflows.get("order-flow").create(id="old")
    workflows_env.run_until_idle()
    deploy(OrderV2Unguarded)
    code, out, err = verify_command("order-flow")
    assert code == 1 and "old" in out and "'check for fraud-1'" in err


# -- where people see it -----------------------------------------------------------------------------------

@pytest.fixture
def two_versions(workflows_env, deploy):
    deploy(OrderV1)
    old = workflows.get("order-flow").create(id="on-one")
    workflows_env.run_until_idle()
    deploy(OrderV2)
    new = workflows.get("order-flow").create(id="on-two")
    workflows_env.run_until_idle()
    return old, new


@pytest.fixture
def api(db):
    from django.contrib.auth.models import User

    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_api_shows_the_version_and_the_markers(two_versions, api):
    old, new = two_versions
    listed = api.get("/workflows/order-flow/instances/").json()["results"]
    assert {(item["id"], item["version"]) for item in listed} == {("on-one", "1"), ("on-two", "2")}
    only = api.get("/workflows/order-flow/instances/", {"version": "1"}).json()["results"]
    assert [item["id"] for item in only] == ["on-one"]
    assert api.get("/workflows/order-flow/instances/", {"version": "9"}).json()["results"] == []
    refused = api.get("/workflows/order-flow/instances/", {"version": "bad\x01"})
    assert refused.status_code == 400
    detail = api.get("/workflows/order-flow/instances/on-two/").json()
    assert detail["version"] == "2"
    marker = [step for step in detail["steps"] if step["type"] == "patch"]
    assert marker == [{**marker[0], "name": "fraud-check", "key": "patched(fraud-check)", "status": "succeeded",
                       "after_steps": 1}]
    assert "attempts" not in marker[0]
    assert api.get("/workflows/order-flow/instances/on-one/").json()["version"] == "1"


def describe(*args) -> str:
    out = io.StringIO()
    call_command("workflows", "instances", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_cli_shows_the_version(two_versions):
    text = describe("describe", "order-flow", "on-two")
    assert re.search(r"^Version\s+2$", text, re.MULTILINE)
    assert re.search(r"^patched\(fraud-check\)\s+patch\s+succeeded", text, re.MULTILINE)
    assert json.loads(describe("describe", "order-flow", "on-one", "--json"))["version"] == "1"
    listing = describe("list", "order-flow")
    assert "VERSION" in listing.splitlines()[0]
    assert re.search(r"^on-one\s+waiting\s+1\s", listing, re.MULTILINE)


def test_the_cli_says_when_no_version_was_recorded(workflows_env, deploy):
    deploy(Unversioned)
    workflows.get("unversioned-flow").create(id="plain")
    assert re.search(r"^Version\s+- \(none recorded\)$", describe("describe", "unversioned-flow", "plain"),
                     re.MULTILINE)


def listed_ids(response):
    return re.findall(r'<th class="field-instance_id"><a href="[^"]+">([^<]+)</a>', response.content.decode())


LIST_URL = "/admin/django_workflows/instance/"


def the_version_filter(response):
    [found] = [spec for spec in response.context["cl"].get_filters(response.wsgi_request)[0]
               if getattr(spec, "parameter_name", None) == "version"]
    return found


def test_the_admin_filters_by_version(two_versions, admin_client, deploy):
    deploy(Unversioned)
    workflows.get("unversioned-flow").create(id="plain")
    everything = admin_client.get(LIST_URL)
    assert sorted(listed_ids(everything)) == ["on-one", "on-two", "plain"]
    version_filter = the_version_filter(everything)
    assert [value for value, _ in version_filter.lookup_choices] == ["2", "1", "(none)"]
    assert listed_ids(admin_client.get(LIST_URL, {"version": "1"})) == ["on-one"]
    assert listed_ids(admin_client.get(LIST_URL, {"version": "2"})) == ["on-two"]
    assert listed_ids(admin_client.get(LIST_URL, {"version": "(none)"})) == ["plain"]
    # Within a workflow, the versions of its instances only.
    scoped = admin_client.get(LIST_URL, {"workflow": "unversioned-flow"})
    version_filter = the_version_filter(scoped)
    assert [value for value, _ in version_filter.lookup_choices] == ["(none)"]


def test_the_admin_instance_page_shows_the_version_and_a_quiet_marker_row(two_versions, admin_client):
    _, new = two_versions
    html = admin_client.get(f"{LIST_URL}{new.pk}/change/").content.decode()
    assert re.search(r"<dt>Version</dt><dd[^>]*><code>2</code>", html)
    # The journal: the marker on one quiet line, with no "Restart from here".
    [marker_row] = re.findall(r'<tr class="dw-patch-row">.*?</tr>', html, re.DOTALL)
    assert "patched(fraud-check)" in marker_row and "after 1 step" in marker_row
    assert "Restart from here" not in marker_row
    assert html.count("Restart from here") == 3  # reserve, check for fraud, cool-off
    # The timeline: a thin row with a tick, and its legend.
    assert 'class="dw-patch-mark"' in html and "dw-key-patch" in html


def test_the_admin_instance_page_of_an_instance_without_a_version(workflows_env, deploy, admin_client):
    deploy(Unversioned)
    plain = workflows.get("unversioned-flow").create(id="plain")
    html = admin_client.get(f"{LIST_URL}{plain.pk}/change/").content.decode()
    assert re.search(r"<dt>Version</dt><dd[^>]*><span class=\"dw-quiet\">none recorded</span>", html)
    assert "dw-key-patch" not in html


def test_settings_override_is_read_at_create(workflows_env, deploy):
    deploy(Unversioned)
    with override_settings(DJANGO_WORKFLOWS={"VERSION": "a"}):
        first = workflows.get("unversioned-flow").create()
    with override_settings(DJANGO_WORKFLOWS={"VERSION": "b"}):
        second = workflows.get("unversioned-flow").create()
    assert (row(first).version, row(second).version) == ("a", "b")
