"""Per-instance retention chosen at create (Cloudflare's ``retention``): how long a finished instance is
kept, by how it ended, instead of ``RETENTION_DAYS``; through Python, the API, the CLI and the purge."""

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import InvalidParams, workflows
from django_workflows.models import Event, Instance, Step
from django_workflows.store.retention import purge_finished

DAY = timedelta(days=1)
SECOND = timedelta(seconds=1)
MILLISECOND = timedelta(milliseconds=1)


@pytest.fixture
def month(settings):
    """RETENTION_DAYS = 30: the setting an instance without its own retention follows."""
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30}


def row(instance) -> Instance:
    return Instance.objects.get(pk=instance.pk)


def kept(*instances) -> set:
    """Which of ``instances`` are still stored."""
    return set(Instance.objects.filter(pk__in=[i.pk for i in instances]).values_list("pk", flat=True))


def pks(*instances) -> set:
    return {i.pk for i in instances}


def finished(workflows_env, name: str, retention=None, instance_id=None):
    instance = workflows.get(name).create(id=instance_id, params={}, retention=retention)
    workflows_env.run_until_idle()
    return instance


# The purge honours each instance's own retention.

def test_an_instance_kept_shorter_than_the_setting_is_deleted_when_its_own_time_runs_out(workflows_env,
                                                                                         month):
    own = finished(workflows_env, "three-steps", {"success": "3 days"})
    default = finished(workflows_env, "three-steps")
    assert row(own).purge_at == row(own).ended_at + 3 * DAY
    assert row(default).purge_at is None
    workflows_env.advance(3 * DAY - SECOND)
    assert purge_finished() == 0
    workflows_env.advance(2 * SECOND)
    assert purge_finished() == 1
    assert kept(own, default) == pks(default)
    # The journal went with it.
    assert not Step.objects.filter(instance_id=own.pk).exists()
    assert Step.objects.filter(instance_id=default.pk).count() == 3


def test_an_instance_kept_longer_than_the_setting_outlives_it(workflows_env, month):
    own = finished(workflows_env, "three-steps", {"success": "60 days"})
    default = finished(workflows_env, "three-steps")
    workflows_env.advance(31 * DAY)
    assert purge_finished() == 1
    assert kept(own, default) == pks(own)
    workflows_env.advance(29 * DAY - SECOND)
    assert purge_finished() == 0
    workflows_env.advance(2 * SECOND)
    assert purge_finished() == 1
    assert not kept(own)


def test_success_applies_to_complete_and_error_to_errored_and_terminated(workflows_env, month):
    retention = {"success": "1 day", "error": "10 days"}
    complete = finished(workflows_env, "three-steps", retention)
    errored = finished(workflows_env, "uncaught", retention)
    terminated = finished(workflows_env, "approval", retention)  # waits for its approval
    terminated.terminate()  # one statement, without a replay
    rolled_back = finished(workflows_env, "approval", retention)
    rolled_back.terminate(rollback=True)  # ends in a replay
    workflows_env.run_until_idle()
    statuses = {i.pk: i.status()["status"] for i in (complete, errored, terminated, rolled_back)}
    assert statuses == {complete.pk: "complete", errored.pk: "errored", terminated.pk: "terminated",
                        rolled_back.pk: "terminated"}
    assert row(complete).purge_at == row(complete).ended_at + DAY
    for instance in (errored, terminated, rolled_back):
        assert row(instance).purge_at == row(instance).ended_at + 10 * DAY
    workflows_env.advance(DAY + SECOND)
    assert purge_finished() == 1
    assert kept(complete, errored, terminated, rolled_back) == pks(errored, terminated, rolled_back)
    workflows_env.advance(9 * DAY)
    assert purge_finished() == 3
    assert not kept(complete, errored, terminated, rolled_back)


def test_an_outcome_without_its_own_retention_follows_the_setting(workflows_env, month):
    # Only errors are kept differently: a complete instance keeps to RETENTION_DAYS.
    instance = finished(workflows_env, "three-steps", {"error": "1 day"})
    assert row(instance).purge_at is None
    workflows_env.advance(2 * DAY)
    assert purge_finished() == 0
    workflows_env.advance(29 * DAY)
    assert purge_finished() == 1


def test_its_own_retention_deletes_an_instance_even_with_the_setting_off(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": None}
    own = finished(workflows_env, "three-steps", {"success": 0})
    default = finished(workflows_env, "three-steps")
    workflows_env.advance(SECOND)
    assert purge_finished() == 1
    assert kept(own, default) == pks(default)
    workflows_env.advance(400 * DAY)
    assert purge_finished() == 0


def test_a_restart_clears_the_purge_time_and_the_next_end_sets_it_again(workflows_env, month):
    instance = finished(workflows_env, "three-steps", {"success": "1 day"})
    workflows_env.advance(12 * timedelta(hours=1))
    instance.restart()
    assert row(instance).purge_at is None
    # Queued again, it is live: its first end's retention does not delete it.
    workflows_env.clock.advance(2 * DAY)
    assert purge_finished() == 0
    workflows_env.run_until_idle()
    again = row(instance)
    assert again.status == "complete" and again.purge_at == again.ended_at + DAY == workflows_env.now + DAY
    workflows_env.advance(DAY - SECOND)
    assert purge_finished() == 0
    workflows_env.advance(2 * SECOND)
    assert purge_finished() == 1


def test_live_instances_are_never_purged_whatever_their_retention(workflows_env, month):
    waiting = finished(workflows_env, "approval", {"success": 0, "error": 0})
    paused = finished(workflows_env, "approval", {"success": 0, "error": 0})
    paused.pause()
    # Restarted by a worker of the previous release, which leaves the purge time of its last end.
    restarted = finished(workflows_env, "three-steps", {"success": 0})
    purge_at = row(restarted).purge_at
    restarted.restart()
    Instance.objects.filter(pk=restarted.pk).update(purge_at=purge_at)
    workflows_env.clock.advance(400 * DAY)
    assert purge_finished() == 0
    assert kept(waiting, paused, restarted) == pks(waiting, paused, restarted)


def test_the_purge_re_checks_the_purge_time_of_each_instance_it_deletes(workflows_env, month):
    """An instance restarted after its id was read, and finished again with a new purge time, keeps its
    new journal."""
    instance = finished(workflows_env, "three-steps", {"success": "1 day"})
    workflows_env.advance(2 * DAY)
    state = {}

    def restart_after_the_batch_is_chosen(execute, sql, params, many, context):
        if state.get("chosen") and not state.get("done"):
            state["done"] = True
            instance.restart()
            workflows_env.run_until_idle()
        if sql.startswith("SELECT") and '"purge_at" <' in sql and "LIMIT" in sql and "FOR UPDATE" not in sql:
            state["chosen"] = True
        return execute(sql, params, many, context)

    with connection.execute_wrapper(restart_after_the_batch_is_chosen):
        assert purge_finished() == 0
    assert state.get("done")
    assert instance.status()["status"] == "complete"
    assert Step.objects.filter(instance_id=instance.pk).count() == 3


# Bad input changes nothing.

BAD_RETENTION = [
    pytest.param("3 days", "must be a dict", id="not-a-dict"),
    pytest.param({"sucess": "3 days"}, "not 'sucess'", id="unknown-key"),
    pytest.param({"successRetention": "3 days"}, "Cloudflare's name for 'success'", id="cloudflare-key"),
    pytest.param({"success": "soon"}, "cannot parse 'soon'", id="unparseable"),
    pytest.param({"error": -1}, "negative", id="negative"),
    pytest.param({"error": "-2 days"}, "cannot parse", id="negative-text"),
    pytest.param({"success": "366 days"}, "longer than the 365 days", id="over-a-year"),
    pytest.param({"success": 10**30}, "longer than the 365 days", id="past-a-timedelta"),
    pytest.param({"success": True}, "expected milliseconds", id="bool"),
    pytest.param({"success": [1]}, "expected milliseconds", id="list"),
    pytest.param({"success": float("nan")}, "not a finite number", id="nan"),
]


@pytest.mark.parametrize("retention, message", BAD_RETENTION)
def test_a_bad_retention_is_refused_and_creates_nothing(workflows_env, retention, message):
    with pytest.raises(InvalidParams, match=message.replace("(", r"\(")) as info:
        workflows.get("three-steps").create(id="refused", retention=retention)
    assert info.value.code == "invalid_params"
    with pytest.raises(InvalidParams, match=message.replace("(", r"\(")):
        workflows.get("three-steps").create_batch([{"id": "fine"}, {"id": "refused", "retention": retention}])
    assert not Instance.objects.exists()
    assert not workflows_env.executor.enqueued


def test_a_year_is_the_longest_and_zero_the_shortest_retention(workflows_env):
    longest = workflows.get("three-steps").create(retention={"success": "365 days", "error": "1 year"})
    shortest = workflows.get("three-steps").create(retention={"success": 0, "error": "0 seconds"})
    assert (row(longest).success_retention, row(longest).error_retention) == (365 * DAY, 365 * DAY)
    assert (row(shortest).success_retention, row(shortest).error_retention) == (timedelta(0), timedelta(0))


def test_a_batch_takes_each_items_retention(workflows_env):
    first, second, third = workflows.get("three-steps").create_batch([
        {"id": "b1", "retention": {"success": "2 days"}},
        {"id": "b2", "params": {"x": 1}, "retention": {"error": 1500}},
        {"id": "b3"},
    ])
    assert (row(first).success_retention, row(first).error_retention) == (2 * DAY, None)
    assert (row(second).success_retention, row(second).error_retention) == (None, 1500 * MILLISECOND)
    assert (row(third).success_retention, row(third).error_retention) == (None, None)


# An instance written by a worker of the previous release.

def test_an_instance_inserted_without_the_retention_columns_runs_and_follows_the_setting(workflows_env, month,
                                                                                      client_for):
    """During a rolling deploy, workers of the previous release insert instances naming only the columns
    they know; the database fills the retention columns with NULL."""
    from django_workflows.shared import clock

    stamp = connection.ops.adapt_datetimefield_value(clock.now())
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_workflows_instance (workflow_name, instance_id, params, status, output, "
            "error, traceback, wake_at, waiting_for, current_step, lease_owner, lease_expires_at, epoch, "
            "crash_count, created_at, started_at, ended_at, updated_at, terminating) "
            "VALUES ('three-steps', 'old-release', NULL, 'queued', NULL, NULL, '', NULL, NULL, '', '', NULL, "
            "0, 0, %s, NULL, NULL, %s, %s)",
            [stamp, stamp, False],
        )
    instance = workflows.get("three-steps").get("old-release")
    stored = row(instance)
    assert (stored.success_retention, stored.error_retention, stored.purge_at) == (None, None, None)
    workflows_env.executor.enqueue_replay(instance.pk)
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete" and row(instance).purge_at is None
    assert client_for().get("/workflows/three-steps/instances/old-release/").json()["retention"] is None
    workflows_env.advance(29 * DAY)
    assert purge_finished() == 0
    workflows_env.advance(2 * DAY)
    assert purge_finished() == 1


# The API.

@pytest.fixture
def client_for(db):
    def make() -> APIClient:
        user = User.objects.create_superuser("admin", "admin@example.com", "pw")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        return client

    return make


@pytest.fixture
def api(client_for, workflows_env):
    return client_for()


def test_the_api_creates_an_instance_with_its_retention_and_describes_it(api, workflows_env):
    response = api.post("/workflows/three-steps/instances/",
                        {"instance_id": "r1", "retention": {"success": "3 days", "error": 5000}},
                        format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["retention"] == {"success": 3 * 86_400_000, "error": 5000, "purge_at": None}
    stored = Instance.objects.get(instance_id="r1")
    assert (stored.success_retention, stored.error_retention) == (3 * DAY, timedelta(seconds=5))
    workflows_env.run_until_idle()
    described = api.get("/workflows/three-steps/instances/r1/").json()
    assert described["status"] == "complete"
    assert described["retention"]["purge_at"] == (stored.created_at + 3 * DAY).isoformat()
    # Without one, and with a key given as null, the setting applies.
    plain = api.post("/workflows/three-steps/instances/", {"instance_id": "r2"}, format="json").json()
    assert plain["retention"] is None
    half = api.post("/workflows/three-steps/instances/", {"instance_id": "r3", "retention": {"success": None,
                                                                                           "error": "1 day"}},
                    format="json").json()
    assert half["retention"] == {"success": None, "error": 86_400_000, "purge_at": None}


API_BAD_RETENTION = [
    pytest.param("3 days", id="not-an-object"),
    pytest.param({"sucess": "3 days"}, id="unknown-key"),
    pytest.param({"success": "soon"}, id="unparseable"),
    pytest.param({"success": -1}, id="negative"),
    pytest.param({"success": "366 days"}, id="over-a-year"),
    pytest.param({"success": 10**30}, id="past-a-timedelta"),
    pytest.param({"success": 1e308}, id="huge-float"),
    pytest.param({"error": True}, id="bool"),
    pytest.param({"error": [1]}, id="list"),
    pytest.param({"error": {"days": 3}}, id="object"),
]


@pytest.mark.parametrize("retention", API_BAD_RETENTION)
def test_the_api_answers_400_to_a_bad_retention_and_creates_nothing(api, retention):
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "r1", "retention": retention},
                        format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] in ("invalid", "unknown_field") and "retention" in error["fields"], error
    batch = api.post("/workflows/three-steps/instances/batch/",
                     [{"instance_id": "fine"}, {"instance_id": "r1", "retention": retention}], format="json")
    assert batch.status_code == 400, batch.content
    assert "retention" in batch.json()["error"]["fields"]["1"]  # the second item
    assert not Instance.objects.exists()


def test_the_api_batch_takes_each_items_retention(api):
    response = api.post("/workflows/three-steps/instances/batch/",
                        [{"instance_id": "b1", "retention": {"success": "2 days"}}, {"instance_id": "b2"}],
                        format="json")
    assert response.status_code == 201, response.json()
    stored = {i.instance_id: (i.success_retention, i.error_retention) for i in Instance.objects.all()}
    assert stored == {"b1": (2 * DAY, None), "b2": (None, None)}


def test_the_schema_describes_the_retention_a_create_takes(api):
    schema = api.get("/workflows/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    create = components["CreateInstance"]["properties"]["retention"]
    assert "RetentionInput" in json.dumps(create)
    assert set(components["RetentionInput"]["properties"]) == {"success", "error"}
    assert set(components["Retention"]["properties"]) == {"success", "error", "purge_at"}


# The CLI.

def cli(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_cli_triggers_with_a_retention_and_describes_it(workflows_env):
    instance_id = cli("trigger", "three-steps", "--id", "c1", "--retention-success", "3 days",
                      "--retention-error", "86400000").strip()
    assert instance_id == "c1"
    stored = Instance.objects.get(instance_id="c1")
    assert (stored.success_retention, stored.error_retention) == (3 * DAY, DAY)
    workflows_env.run_until_idle()
    text = cli("instances", "describe", "three-steps", "c1")
    assert "Retention      success 3 days, error 1 day" in text
    assert "Deleted after" in text
    retention = json.loads(cli("instances", "describe", "three-steps", "c1", "--json"))["retention"]
    assert (retention["success"], retention["error"]) == (3 * 86_400_000, 86_400_000)
    # Only one outcome: the other follows the setting.
    cli("trigger", "three-steps", "--id", "c2", "--retention-error", "2 hours")
    assert "success RETENTION_DAYS, error 2 hours" in cli("instances", "describe", "three-steps", "c2")
    plain = cli("trigger", "three-steps").strip()
    assert "Retention" not in cli("instances", "describe", "three-steps", plain)


@pytest.mark.parametrize("flag, value", [("--retention-success", "soon"), ("--retention-error", "400 days"),
                                         ("--retention-error", "-5")])
def test_the_cli_refuses_a_bad_retention_and_creates_nothing(workflows_env, flag, value):
    with pytest.raises(CommandError, match=r"retention\['(success|error)'\]"):
        cli("trigger", "three-steps", "--id", "c1", f"{flag}={value}")
    assert not Instance.objects.exists()


# The admin shows it.

def test_the_admin_instance_page_shows_the_retention(workflows_env, client):
    admin = User.objects.create_superuser("staff", "staff@example.com", "pw")
    client.force_login(admin)
    instance = finished(workflows_env, "three-steps", {"success": "3 days"})
    page = client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert "complete: 3 days; errored or terminated: RETENTION_DAYS" in page
    assert "deleted after" in page
    plain = finished(workflows_env, "three-steps")
    plain_page = client.get(f"/admin/django_workflows/instance/{plain.pk}/change/").content.decode()
    assert "Kept after it ends" not in plain_page


def test_the_inbox_goes_with_an_instance_its_own_retention_deletes(workflows_env, month):
    instance = finished(workflows_env, "approval", {"success": "1 hour"})
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    workflows_env.advance(timedelta(hours=1, seconds=1))
    assert purge_finished() == 1
    assert not Event.objects.filter(instance_id=instance.pk).exists()
