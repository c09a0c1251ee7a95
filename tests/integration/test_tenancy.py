"""Two tenants (tests/tenancy): neither can list, read, steer, approve, send to, or learn that the other's
instances exist, through the API, the admin, webhooks or the command line. Every refusal is compared with
the answer for an id that was never created: the same status, the same body."""

import io
import re
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Event, Instance
from django_workflows.webhooks import sign
from tests.tenancy import SECRETS, SETTINGS, make_tenants

OTHER = {"a": "b", "b": "a"}
NEVER = "never-created"


@pytest.fixture
def tenants(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = SETTINGS
    members = make_tenants()
    for tenant in ("a", "b"):
        for n in range(2):
            workflows.get("approval").create(id=f"{tenant}{n}", params={"tenant": tenant})
    workflows.get("refund").create(id="b-refund", params={"tenant": "b"})
    workflows_env.run_until_idle()
    assert set(Instance.objects.values_list("status", flat=True)) == {"waiting"}
    return members


def api(member) -> APIClient:
    client = APIClient()
    client.force_authenticate(member)
    return client


def state():
    return (sorted(Instance.objects.values_list("instance_id", "status", "params", "updated_at")),
            sorted(Event.objects.values_list("pk", "type", "payload")))


def same_as_missing(first, second):
    """Two answers alike but for the names each quotes (in their messages)."""
    assert first.status_code == second.status_code, (first.content, second.content)
    assert _unnamed(first.content.decode()) == _unnamed(second.content.decode())


def _unnamed(text: str) -> str:
    for name in ("b-refund", "refund", "no-such", NEVER, "a1", "b1"):
        text = text.replace(f"'{name}'", "X").replace(f"{name}/", "X/")
    return text


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_the_api_lists_and_counts_only_a_tenants_own(tenants, tenant):
    client = api(tenants[tenant])
    listed = client.get("/workflows/approval/instances/").json()
    assert {row["id"] for row in listed["results"]} == {f"{tenant}0", f"{tenant}1"}
    assert listed["count"] == 2
    described = {w["name"]: w for w in client.get("/workflows/").json()}
    assert described["approval"]["instances"]["waiting"] == 2
    # Tenant a is not told that refund exists: not in the list, and missing like a name never defined.
    assert ("refund" in described) == (tenant == "b")
    if tenant == "a":
        same_as_missing(client.get("/workflows/refund/"), client.get("/workflows/no-such/"))
        same_as_missing(client.get("/workflows/refund/instances/"), client.get("/workflows/no-such/instances/"))
        assert "approval" not in client.get("/workflows/no-such/").json()["error"]["message"]


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_the_api_answers_another_tenants_instance_as_missing(tenants, tenant):
    client, theirs = api(tenants[tenant]), f"{OTHER[tenant]}1"
    before = state()
    base = "/workflows/approval/instances"
    same_as_missing(client.get(f"{base}/{theirs}/"), client.get(f"{base}/{NEVER}/"))
    for change in ({"status": "pause"}, {"status": "terminate"}, {"from": {"name": "ask", "count": 1}}):
        same_as_missing(client.patch(f"{base}/{theirs}/status/", change, format="json"),
                        client.patch(f"{base}/{NEVER}/status/", change, format="json"))
    approve = {"outcome": "approved"}
    for event_type in ("manager-approval", "anything"):
        same_as_missing(client.post(f"{base}/{theirs}/events/{event_type}/", approve, format="json"),
                        client.post(f"{base}/{NEVER}/events/{event_type}/", approve, format="json"))
    # Nor may a tenant start an instance into the other's list.
    refused = client.post(f"{base}/", {"instance_id": "planted", "params": {"tenant": OTHER[tenant]}}, format="json")
    assert refused.status_code == 403
    refused = client.post(f"{base}/batch/", [{"params": {"tenant": tenant}}, {"params": {"tenant": OTHER[tenant]}}],
                          format="json")
    assert refused.status_code == 403
    assert state() == before
    # Its own, it may do all of it.
    assert client.get(f"{base}/{tenant}1/").json()["params"] == {"tenant": tenant}
    sent = client.post(f"{base}/{tenant}1/events/manager-approval/", approve, format="json")
    assert sent.status_code == 202 and sent.json()["instance"]["id"] == f"{tenant}1"
    assert client.patch(f"{base}/{tenant}0/status/", {"status": "pause"}, format="json").status_code == 200
    assert client.post(f"{base}/", {"params": {"tenant": tenant}}, format="json").status_code == 201


def test_a_tenant_cannot_reach_a_workflow_of_the_other_alone(tenants):
    client = api(tenants["a"])
    before = state()
    base = "/workflows/refund/instances"
    same_as_missing(client.get(f"{base}/b-refund/"), client.get("/workflows/no-such/instances/b-refund/"))
    same_as_missing(client.post(f"{base}/b-refund/events/note/", {}, format="json"),
                    client.post("/workflows/no-such/instances/b-refund/events/note/", {}, format="json"))
    assert client.post(f"{base}/", {"params": {"tenant": "a"}}, format="json").status_code == 404
    assert state() == before


def test_webhooks_are_the_secret_holders_own(tenants):
    """A webhook has no user: its workflow's secret is the authority. One workflow's secret opens no
    other's endpoint, and the answer is the one for a workflow that does not exist."""
    body = json.dumps({"amount": 5}).encode()
    client, before = Client(), state()
    answers = [client.post(f"/workflows/{name}/instances/b-refund/webhooks/refund-settled/", body,
                           content_type="application/json",
                           HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRETS["approval"], body))
               for name in ("refund", "no-such")]
    assert answers[0].status_code == answers[1].status_code == 401
    assert answers[0].json()["error"]["code"] == answers[1].json()["error"]["code"] == "bad_signature"
    assert state() == before


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_the_admin_shows_and_steers_only_a_tenants_own(tenants, tenant):
    client, theirs = Client(), Instance.objects.get(instance_id=f"{OTHER[tenant]}1")
    client.force_login(tenants[tenant])
    listed = client.get("/admin/django_workflows/instance/").content.decode()
    assert f">{tenant}0<" in listed and f">{OTHER[tenant]}0<" not in listed
    assert (">b-refund<" in listed) == (tenant == "b")
    queue = client.get("/admin/django_workflows/instance/approvals/").content.decode()
    # As whole words: the page's CSRF token, random letters and digits, may hold "a1" inside it.
    assert re.search(rf"\b{tenant}1\b", queue) and not re.search(rf"\b{OTHER[tenant]}1\b", queue)
    workflows_page = client.get("/admin/django_workflows/instance/workflows/").content.decode()
    assert ("refund" in workflows_page) == (tenant == "b")
    before = state()
    missing_pk = Instance.objects.order_by("-pk").first().pk + 1000
    page, missing = (client.get(f"/admin/django_workflows/instance/{pk}/change/") for pk in (theirs.pk, missing_pk))
    assert page.status_code == missing.status_code == 302
    for button, data in (("steer/pause", {}), ("steer/terminate", {"rollback": "1"}),
                         ("decide", {"outcome": "approved", "step": theirs.current_step}),
                         ("send-event", {"type": "manager-approval", "payload": '{"outcome": "approved"}'})):
        answers = [client.post(f"/admin/django_workflows/instance/{pk}/{button}/", data)
                   for pk in (theirs.pk, missing_pk)]
        assert answers[0].status_code == answers[1].status_code == 404, button
    # The list's bulk action skips what the user may not see, whatever the posted ids say.
    client.post("/admin/django_workflows/instance/", {"action": "pause_selected", "_selected_action": [theirs.pk]})
    assert state() == before


def run(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_the_command_line_given_a_user_shows_and_steers_only_their_own(tenants, tenant):
    user, theirs = f"member-{tenant}", f"{OTHER[tenant]}1"
    listed = json.loads(run("instances", "list", "approval", "--user", user, "--json"))
    assert {row["id"] for row in listed} == {f"{tenant}0", f"{tenant}1"}
    before = state()
    for args in (("describe", "approval", theirs), ("pause", "approval", theirs),
                 ("send-event", "approval", theirs, "--type", "manager-approval", "--payload", '{"outcome": "approved"}')):
        with pytest.raises(CommandError) as refused:
            run("instances", *args, "--user", user)
        with pytest.raises(CommandError) as missing:
            run("instances", *[NEVER if arg == theirs else arg for arg in args], "--user", user)
        assert str(refused.value).replace(theirs, "X") == str(missing.value).replace(NEVER, "X")
    assert state() == before
    assert json.loads(run("instances", "describe", "approval", f"{tenant}1", "--user", user, "--json"))["id"] == f"{tenant}1"
    # Without --user, the account that runs the command sees everything, as the project's own code does.
    assert len(json.loads(run("instances", "list", "approval", "--json"))) == 4
