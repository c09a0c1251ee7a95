"""Who may see and steer which instance (django_workflows.shared.workflow_access) beyond the two tenants of
test_tenancy.py: the defaults, the API's own object permissions, and what a sender who may not view
an instance learns of it (nothing)."""

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.permissions import BasePermission
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.shared import workflow_access as access
from django_workflows.models import Instance


class NotTheirs(BasePermission):
    """An API_PERMISSION_CLASSES entry: anyone signed in, but no instance is theirs."""

    def has_permission(self, request, view):
        return request.user.is_authenticated

    def has_object_permission(self, request, view, obj):
        return False


def user_with(*codenames, username="someone"):
    user = User.objects.create(username=username, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def waiting(workflows_env):
    instance = workflows.get("approval").create(id="a1", params={})
    workflows.get("refund").create(id="r1", params={})
    workflows_env.run_until_idle()
    return instance


def test_each_workflow_has_its_own_permissions_made_after_migrate(db):
    codenames = set(Permission.objects.filter(content_type__app_label="django_workflows")
                    .values_list("codename", flat=True))
    for name in workflows.names():
        assert {f"view:{name}", f"steer:{name}", f"send_event:{name}"} <= codenames


def test_the_api_honours_its_permission_classes_object_check(waiting, settings):
    """Defect 3 of issue 34: a has_object_permission that says no was never asked."""
    settings.DJANGO_WORKFLOWS = {"API_PERMISSION_CLASSES": ["tests.integration.test_access.NotTheirs"]}
    client = api(user_with("send_event"))
    base = "/workflows/approval/instances/a1"
    for answer in (client.get(f"{base}/"), client.patch(f"{base}/status/", {"status": "pause"}, format="json"),
                   client.post(f"{base}/events/manager-approval/", {"outcome": "approved"}, format="json")):
        assert answer.status_code == 404, answer.content
        assert answer.json()["error"]["code"] == "instance_not_found"
    assert Instance.objects.get(instance_id="a1").status == "waiting"


def test_workflow_permissions_narrow_the_model_permissions(waiting, settings):
    """Defect 3 of issue 34: every view_instance holder read every workflow's instances, and every
    send_event holder could send to any workflow. With WORKFLOW_PERMISSIONS each workflow's own is needed."""
    user = user_with("view_instance", "send_event", access.codename(access.VIEW, "refund"))
    client = api(user)
    assert client.get("/workflows/refund/instances/").json()["count"] == 1
    assert client.get("/workflows/approval/instances/").json()["count"] == 1  # as before: nothing configured
    settings.DJANGO_WORKFLOWS = {"WORKFLOW_PERMISSIONS": True}
    user = User.objects.get(pk=user.pk)  # its permissions' cache
    client = api(user)
    assert client.get("/workflows/refund/instances/").json()["count"] == 1
    assert client.get("/workflows/approval/instances/").status_code == 404
    assert [w["name"] for w in client.get("/workflows/").json()] == ["refund"]
    # May see refund's instances, not send them events: refused before the lookup, alike for any id.
    for instance_id in ("r1", "never"):
        refused = client.post(f"/workflows/refund/instances/{instance_id}/events/note/", {}, format="json")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "event_permission"


def test_a_sender_who_may_not_view_learns_nothing(waiting):
    """Defect 8 of issue 34: 403 for an instance that exists and 404 for one that does not, the status in
    the 202, and the admin's messages naming the status of any primary key."""
    client = api(user_with("send_event"))
    # refund's manager-approval needs testapp.approve_refund: the refusal is the same for any id.
    answers = [client.post(f"/workflows/refund/instances/{instance_id}/events/manager-approval/",
                           {"outcome": "approved"}, format="json") for instance_id in ("r1", "never")]
    assert [a.status_code for a in answers] == [403, 403]
    assert answers[0].json() == answers[1].json()
    accepted = client.post("/workflows/approval/instances/a1/events/note/", {}, format="json")
    assert accepted.status_code == 202 and accepted.json()["instance"] is None
    admin = Client()
    admin.force_login(User.objects.get(username="someone"))
    pk = Instance.objects.get(instance_id="a1").pk
    for button in ("decide", "send-event"):
        refused = admin.post(f"/admin/django_workflows/instance/{pk}/{button}/",
                             {"outcome": "approved", "step": "x", "type": "note", "payload": "{}"})
        assert refused.status_code == 404
    assert "waiting" not in admin.get("/admin/").content.decode()
