"""Large values in file storage: a step result, an output or an event payload over
``LARGE_VALUE_THRESHOLD`` is written through Django's storage API (a real ``FileSystemStorage`` in a
temporary folder here) and the journal keeps a reference; replays read it back, checking its hash;
retention deletes the files with their instance."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.shared.definition import WorkflowEntrypoint, registry
from django_workflows.shared.large_values import MARKER, reference_of
from django_workflows.models import Event, Instance, Step
from django_workflows.store.retention import purge_finished

THRESHOLD = 1000
calls: list[str] = []


class Bulky(WorkflowEntrypoint):
    """Returns, waits for and ends with values as large as its params ask."""

    name = "bulky"

    def run(self, event, step):
        size = event.payload["size"]
        big = step.do("big", lambda: calls.append("big") or {"rows": "x" * size})
        small = step.do("small", lambda: {MARKER: "a user's own key", "n": 1})
        received = step.wait_for_event("upload", "upload", timeout="1 hour")
        return {"big": len(big["rows"]), "small": small, "payload": len(received.payload["blob"]),
                "tail": "é" * size}


registry.unregister(Bulky)


@pytest.fixture
def bulky(settings, tmp_path):
    registry.register(Bulky)
    calls.clear()
    settings.STORAGES = {**settings.STORAGES,
                         "default": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                     "OPTIONS": {"location": str(tmp_path)}}}
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "LARGE_VALUE_THRESHOLD": THRESHOLD,
                                 "RETENTION_DAYS": 1}
    yield tmp_path
    registry.unregister(Bulky)


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json"))


def run_to_end(env, size=5000):
    instance = workflows.get("bulky").create(params={"size": size})
    env.run_until_idle()
    instance.send_event("upload", {"blob": "y" * size})
    env.run_until_idle()
    return instance


def test_large_values_go_to_storage_and_replays_read_them_back(workflows_env, bulky):
    instance = run_to_end(workflows_env)
    status = instance.status()
    assert status["status"] == "complete"
    assert status["output"] == {"big": 5000, "small": {MARKER: "a user's own key", "n": 1}, "payload": 5000,
                                "tail": "é" * 5000}
    big = Step.objects.get(instance_id=instance.pk, name="big")
    reference = reference_of(big.result)
    assert reference is not None and reference.size > THRESHOLD
    content = (bulky / reference.name).read_bytes()
    assert hashlib.sha256(content).hexdigest() == reference.sha256 == Path(reference.name).stem
    assert json.loads(content) == {"rows": "x" * 5000}
    # The user's own object with the reserved key is journaled wrapped, never taken for a reference.
    assert Step.objects.get(instance_id=instance.pk, name="small").result == {
        MARKER: None, "value": {MARKER: "a user's own key", "n": 1}}
    assert reference_of(Event.objects.get(instance_id=instance.pk).payload) is not None
    assert reference_of(Instance.objects.get(pk=instance.pk).output) is not None
    wait = Step.objects.get(instance_id=instance.pk, name="upload")
    assert reference_of(wait.result["payload"]) is not None
    # Three files: the step's result, the event's payload, the output; the wait keeps the event's reference.
    assert len(files(bulky)) == 3
    assert calls == ["big"]  # the replay after the event read the result back, ran nothing again


def test_values_under_the_threshold_stay_in_the_journal(workflows_env, bulky):
    instance = run_to_end(workflows_env, size=10)
    assert instance.status()["status"] == "complete"
    assert files(bulky) == []
    assert Step.objects.get(instance_id=instance.pk, name="big").result == {"rows": "x" * 10}


def test_a_changed_file_stops_the_replay_with_an_error_naming_instance_and_step(workflows_env, bulky):
    instance = workflows.get("bulky").create(id="changed", params={"size": 5000})
    workflows_env.run_until_idle()
    reference = reference_of(Step.objects.get(instance_id=instance.pk, name="big").result)
    (bulky / reference.name).write_text(json.dumps({"rows": "forged"}))
    instance.send_event("upload", {"blob": "y"})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "StoredValueError"
    message = status["error"]["message"]
    assert "instance bulky/changed, step 'big-1'" in message
    assert "has changed" in message and reference.sha256 in message


def test_a_missing_file_stops_the_replay_with_an_error_saying_so(workflows_env, bulky):
    instance = workflows.get("bulky").create(id="missing", params={"size": 5000})
    workflows_env.run_until_idle()
    reference = reference_of(Step.objects.get(instance_id=instance.pk, name="big").result)
    (bulky / reference.name).unlink()
    instance.send_event("upload", {"blob": "y"})
    workflows_env.run_until_idle()
    message = instance.status()["error"]["message"]
    assert "instance bulky/missing, step 'big-1'" in message and "no such file" in message


def test_retention_deletes_the_files_with_their_instance(workflows_env, bulky, django_capture_on_commit_callbacks):
    done = run_to_end(workflows_env)
    kept = workflows.get("bulky").create(params={"size": 5000})
    workflows_env.run_until_idle()
    kept_files = {p for p in files(bulky) if p.parent.name == str(kept.pk)}
    assert kept_files and len(files(bulky)) == 4
    with django_capture_on_commit_callbacks(execute=True):
        assert purge_finished(workflows_env.now + timedelta(days=2)) == 1
    assert not Instance.objects.filter(pk=done.pk).exists()
    assert set(files(bulky)) == kept_files
    assert not (bulky / "django_workflows" / str(done.pk)).exists()


def test_retention_deletes_the_files_a_killed_purge_left_behind(workflows_env, bulky,
                                                                 django_capture_on_commit_callbacks):
    # A purge whose worker died between its commit and deleting the files: the rows are gone, the files
    # stay. The next batch deletes them, as it deletes its own.
    first = run_to_end(workflows_env)
    kept = workflows.get("bulky").create(params={"size": 5000})
    workflows_env.run_until_idle()
    kept_files = {p for p in files(bulky) if p.parent.name == str(kept.pk)}
    purge_finished(workflows_env.now + timedelta(days=2))  # its file deletion never runs: no commit callbacks
    assert not Instance.objects.filter(pk=first.pk).exists() and (bulky / "django_workflows" / str(first.pk)).exists()

    second = run_to_end(workflows_env)
    with django_capture_on_commit_callbacks(execute=True):
        assert purge_finished(workflows_env.now + timedelta(days=4)) == 1
    assert not Instance.objects.filter(pk=second.pk).exists()
    assert not (bulky / "django_workflows" / str(first.pk)).exists()
    assert not (bulky / "django_workflows" / str(second.pk)).exists()
    assert set(files(bulky)) == kept_files


def test_the_hard_cap_still_refuses_what_may_not_be_stored_at_all(workflows_env, bulky, settings):
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "MAX_STEP_RESULT_SIZE": 3000}
    instance = workflows.get("bulky").create(params={"size": 5000})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["error"]["name"] == "StepResultError"
    assert "over the limit of 3000 bytes" in status["error"]["message"]
    assert files(bulky) == []


def test_the_hard_cap_may_be_raised_past_one_mebibyte(workflows_env, bulky, settings):
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "MAX_STEP_RESULT_SIZE": 3 * 1024 * 1024,
                                 "MAX_EVENT_PAYLOAD_SIZE": 3 * 1024 * 1024}
    instance = run_to_end(workflows_env, size=1_200_000)
    assert instance.status()["output"]["big"] == 1_200_000
    assert all(len(str(row.result)) < 1000 for row in Step.objects.filter(instance_id=instance.pk))


def test_the_api_shows_a_reference_readably_and_staff_fetch_it(workflows_env, bulky):
    instance = run_to_end(workflows_env)
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    described = client.get(f"/workflows/bulky/instances/{instance.id}/").json()
    big = next(s for s in described["steps"] if s["name"] == "big")
    reference = big["output"][MARKER]
    assert reference["size"] > THRESHOLD and len(reference["sha256"]) == 64
    fetched = client.get(reference["url"])
    assert fetched.status_code == 200
    assert fetched.json() == {"rows": "x" * 5000}


def test_checks_refuse_a_storage_alias_that_is_not_configured(settings):
    settings.DJANGO_WORKFLOWS = {"LARGE_VALUE_STORAGE": "nowhere"}
    with pytest.raises(Exception, match="django_workflows.E030"):
        call_command("check", "--fail-level", "ERROR")


class TypedAndLarge(WorkflowEntrypoint):
    """Typed values (a Decimal, an aware datetime, a set) inside a value large enough for file storage:
    the journal keeps the file's reference, the file the tagged JSON."""

    name = "typed-and-large"

    def run(self, event, step):
        def ledger():
            calls.append("ledger")
            return {"total": Decimal("12.50"), "at": datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc),
                    "skus": {"a", "b"}, "rows": ["x" * 50] * 40}

        kept = step.do("ledger", ledger)
        received = step.wait_for_event("upload", "upload", timeout="1 hour")
        return {"types": [type(kept["total"]).__name__, type(kept["at"]).__name__, type(kept["skus"]).__name__],
                "payload": type(received.payload["amount"]).__name__, "ledger": kept}


registry.unregister(TypedAndLarge)


def test_a_large_value_holding_typed_values_comes_back_typed_on_every_replay(bulky, workflows_env):
    registry.register(TypedAndLarge)
    try:
        instance = workflows.get("typed-and-large").create(id="t1")
        workflows_env.run_until_idle()
        (journaled,) = Step.objects.filter(instance_id=instance.pk, name="ledger")
        assert reference_of(journaled.result) is not None  # in a file, not in the row
        instance.send_event(type="upload", payload={"amount": Decimal("3.10"), "blob": "y" * 2000})
        workflows_env.run_until_idle()

        status = instance.status()
        assert status["status"] == "complete", status
        assert status["output"]["types"] == ["Decimal", "datetime", "set"]
        assert status["output"]["payload"] == "Decimal"
        assert status["output"]["ledger"]["total"] == Decimal("12.50")
        assert calls.count("ledger") == 1  # the replay after the event read it back, did not run it again
    finally:
        registry.unregister(TypedAndLarge)


def test_the_admin_links_each_stored_value_to_a_download_with_its_permission_checks(workflows_env, bulky):
    instance = run_to_end(workflows_env)
    other = run_to_end(workflows_env, size=4000)
    row = Instance.objects.get(instance_id=instance.id)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = admin.get(f"/admin/django_workflows/instance/{row.pk}/change/").content.decode()
    links = re.findall(r'<a class="dw-download" href="([^"]+)" download>Download the stored value \(([\d,]+) bytes\)',
                       page)
    # The step's result, the output and the event's payload in the inbox.
    big = reference_of(Step.objects.get(instance=row, name="big").result)
    assert len(links) == 3 and (f"/admin/django_workflows/instance/{row.pk}/values/{big.sha256}/",
                                f"{big.size:,}") in links
    big_url = f"/admin/django_workflows/instance/{row.pk}/values/{big.sha256}/"
    downloaded = admin.get(big_url)
    assert downloaded.status_code == 200 and downloaded["Content-Disposition"].startswith("attachment;")
    assert json.loads(downloaded.content) == {"rows": "x" * 5000}

    # Another instance's file is not this instance's, and a malformed hash names nothing.
    other_big = reference_of(Step.objects.get(instance__instance_id=other.id, name="big").result)
    assert admin.get(f"/admin/django_workflows/instance/{row.pk}/values/{other_big.sha256}/").status_code == 404
    assert admin.get(f"/admin/django_workflows/instance/{row.pk}/values/not-a-hash/").status_code == 404

    # Staff without view_instance see no instance, so no value either.
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    client = Client()
    client.force_login(staff)
    refused = client.get(big_url)
    assert refused.status_code == 404 and b"rows" not in refused.content

    # A file changed since it was written is said to be, not served.
    (bulky / big.name).write_text('{"rows": "tampered"}')
    changed = admin.get(big_url)
    assert changed.status_code == 410 and "has changed" in changed.content.decode()
