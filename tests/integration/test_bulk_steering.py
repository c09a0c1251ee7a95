"""Bulk steering by filter: the API's ``instances/bulk/``, the command line's ``--where`` and the admin's
actions, each through ``bulk_steering`` (the transitions table, the tenancy hook, the audit log)."""

import io
import json
import logging

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from django_workflows import InvalidFilter, workflows
from django_workflows.surfaces.bulk_steering import where_filter
from django_workflows.models import Instance
from tests.tenancy import SETTINGS, make_tenants

BULK = "/workflows/approval/instances/bulk/"


@pytest.fixture
def waiting(workflows_env):
    for n in range(3):
        workflows.get("approval").create(id=f"w{n}", params={})
    workflows.get("refund").create(id="other", params={})
    workflows_env.run_until_idle()
    workflows.get("approval").get("w2").terminate()


def statuses() -> dict[str, str]:
    return dict(Instance.objects.values_list("instance_id", "status"))


def root_api() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def run(*args) -> str:
    out = io.StringIO()
    call_command("workflows", "instances", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_api_steers_what_the_filter_selects_and_the_transition_applies_to(waiting, caplog):
    client = root_api()
    with caplog.at_level(logging.INFO, logger="django_workflows.audit"):
        answer = client.post(BULK, {"action": "pause", "where": {"status": ["waiting", "terminated"]}},
                             format="json")
    assert answer.status_code == 200, answer.content
    # w2 is terminated: pause does not apply to it; "other" is another workflow's.
    assert answer.json() == {"action": "pause", "dry_run": False, "count": 2, "ids": ["w0", "w1"], "refused": [],
                             "more": False}
    assert statuses() == {"w0": "paused", "w1": "paused", "w2": "terminated", "other": "waiting"}
    assert [r.getMessage() for r in caplog.records] == ["Paused approval/w0 by api:root",
                                                        "Paused approval/w1 by api:root"]


def test_the_api_takes_a_bounded_batch_and_says_more_remain(waiting):
    client = root_api()
    first = client.post(BULK, {"action": "terminate", "where": {"status": "waiting"}, "limit": 1}, format="json").json()
    assert (first["ids"], first["more"]) == (["w0"], True)
    second = client.post(BULK, {"action": "terminate", "where": {"status": "waiting"}, "limit": 1}, format="json").json()
    assert (second["ids"], second["more"]) == (["w1"], False)
    too_many = client.post(BULK, {"action": "terminate", "where": {"status": "waiting"}, "limit": 5000}, format="json")
    assert too_many.status_code == 400


def test_a_dry_run_changes_nothing(waiting):
    before = statuses()
    answer = root_api().post(BULK, {"action": "restart", "where": {"id": ["w0", "w2"]}, "dry_run": True},
                             format="json").json()
    assert (answer["dry_run"], answer["ids"]) == (True, ["w0", "w2"])
    assert statuses() == before


@pytest.mark.parametrize("where, message", [
    ({}, "Give at least one filter"),
    ({"colour": "red"}, "Unknown filter 'colour'"),
    ({"status": "sleeping"}, "'sleeping' is not a status"),
    ({"id": "bad id!"}, "instance id"),
    ({"status": 3}, "takes a non-empty string"),
])
def test_bad_filters_are_refused_with_what_to_do(waiting, where, message):
    before = statuses()
    answer = root_api().post(BULK, {"action": "terminate", "where": where}, format="json")
    assert answer.status_code == 400
    assert message in json.dumps(answer.json())
    assert statuses() == before


def test_filters_plug_in_by_name_and_by_dotted_family(db, monkeypatch):
    from django.db.models import Q

    from django_workflows.surfaces import bulk_steering

    monkeypatch.setitem(bulk_steering.FILTERS, "tag", lambda name, values: Q(params__tag=values[0]))
    assert where_filter({"tag.tenant": "acme"}) == Q(params__tag="acme")
    with pytest.raises(InvalidFilter):
        where_filter({"subject": "app.model:1"})


def test_the_command_line_steers_by_where_with_a_dry_run(waiting):
    text = run("terminate", "--where", "status=waiting", "--dry-run")
    assert text.startswith("Would terminate 3 instances: approval/w0, approval/w1, refund/other")
    assert statuses()["w0"] == "waiting"
    answer = json.loads(run("terminate", "approval", "--where", "status=waiting", "--json"))
    assert answer["ids"] == ["approval/w0", "approval/w1"] and answer["count"] == 2
    assert statuses() == {"w0": "terminated", "w1": "terminated", "w2": "terminated", "other": "waiting"}
    with pytest.raises(CommandError, match="NAME=VALUE"):
        run("pause", "--where", "status")
    with pytest.raises(CommandError, match="leave out ID"):
        run("pause", "approval", "w0", "--where", "status=waiting")
    with pytest.raises(CommandError, match="required: ID .* or select instances with --where"):
        run("pause", "approval")


def test_each_tenant_steers_only_their_own_in_bulk(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = SETTINGS
    members = make_tenants()
    for tenant in ("a", "b"):
        workflows.get("approval").create(id=f"{tenant}0", params={"tenant": tenant})
    workflows_env.run_until_idle()
    client = APIClient()
    client.force_authenticate(members["a"])
    answer = client.post(BULK, {"action": "pause", "where": {"status": "waiting"}}, format="json").json()
    assert answer["ids"] == ["a0"]
    refund = client.post("/workflows/refund/instances/bulk/", {"action": "pause", "where": {"status": "waiting"}},
                         format="json")
    assert refund.status_code == 404  # a workflow of the other tenant's alone does not exist to them
    text = run("resume", "--where", "status=paused", "--where", "status=waiting", "--user", "member-b")
    assert text.startswith("Resumed 0 instances")
    assert statuses() == {"a0": "paused", "b0": "waiting"}


def test_the_admins_bulk_actions_go_through_the_same_code_and_are_logged(waiting, caplog):
    root = User.objects.create_superuser("boss", "boss@example.com", "pw")
    client = Client()
    client.force_login(root)
    selected = list(Instance.objects.filter(instance_id__in=["w0", "w2"]).values_list("pk", flat=True))
    with caplog.at_level(logging.INFO, logger="django_workflows.audit"):
        client.post("/admin/django_workflows/instance/", {"action": "pause_selected", "_selected_action": selected})
    assert statuses()["w0"] == "paused" and statuses()["w2"] == "terminated"
    assert [r.getMessage() for r in caplog.records] == ["Paused approval/w0 by admin:boss"]
    assert LogEntry.objects.get().change_message == "Paused from the list."
