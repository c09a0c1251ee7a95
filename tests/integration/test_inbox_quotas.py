"""Inbox quotas that cannot be weaponized (issue 34, defect 2): a sender that fills an instance's inbox
fills its own share of it; approvals, signed webhooks and the types the instance waits for are refused
only when their own sender has filled its share; staff see and discard what waits in the inbox."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.errors import InboxFull
from django_workflows.models import Event, Instance
from django_workflows.webhooks import sign

SECRET = "whsec-quotas"


def client_of(username: str, *codenames: str) -> APIClient:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_instance", *codenames]))
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def refund(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": SECRET}, "MAX_PENDING_EVENTS": 6,
                                 "MAX_PENDING_EVENTS_PER_SENDER": 3, "MAX_PENDING_EVENTS_PER_TYPE": 5}
    handle = workflows.get("refund").create(id="r1")
    workflows_env.run_until_idle()
    return handle


def note(client, n=0, instance="r1"):
    return client.post(f"/workflows/refund/instances/{instance}/events/note/", {"text": str(n)}, format="json")


def refusal(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"] if response.status_code >= 400 else ""


def test_a_full_inbox_does_not_keep_out_the_approval_nor_the_providers_webhook(refund, workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "MAX_PENDING_EVENTS": 4}
    # Two senders fill the whole inbox with an open declared type.
    floods = [client_of(name, "send_event") for name in ("mallory", "trudy")]
    assert [note(flood, n).status_code for flood in floods for n in range(2)] == [202] * 4
    assert refusal(note(floods[0])) == (429, "inbox_full")
    manager = client_of("manager", "send_event", "approve_refund")
    approved = manager.post("/workflows/refund/instances/r1/events/manager-approval/", {"outcome": "approved"},
                            format="json")
    assert approved.status_code == 202, approved.content
    workflows_env.run_until_idle()
    assert Instance.objects.get(instance_id="r1").waiting_for == ["refund-settled"]
    body = b'{"amount": 12.5}'
    settled = APIClient().post("/workflows/refund/instances/r1/webhooks/refund-settled/", body,
                               content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body))
    assert settled.status_code == 202, settled.content
    workflows_env.run_until_idle()
    assert refund.status()["output"] == {"refunded": True, "amount": 12.5}


def test_each_quota_names_itself_and_refuses_nothing_else(refund):
    mallory = client_of("mallory", "send_event")
    for n in range(3):
        assert note(mallory, n).status_code == 202
    over = note(mallory)
    assert refusal(over) == (429, "inbox_full")
    assert "MAX_PENDING_EVENTS_PER_SENDER" in over.json()["error"]["message"]
    assert "'api:mallory'" in over.json()["error"]["message"]
    trudy = client_of("trudy", "send_event")
    assert [note(trudy, n).status_code for n in range(3)] == [202, 202, 429]
    assert "MAX_PENDING_EVENTS_PER_TYPE" in note(trudy).json()["error"]["message"]
    # The project's own code is bound by the inbox's size only, and that refuses it too in the end.
    refund.send_event("note", {"text": "python"})
    with pytest.raises(InboxFull, match="MAX_PENDING_EVENTS\\)") as refused:
        refund.send_event("note", {"text": "python"})
    assert refused.value.quota == "total"
    assert Event.objects.count() == 6


def test_the_waited_for_type_is_refused_only_by_its_own_senders_quota(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"MAX_PENDING_EVENTS": 2, "MAX_PENDING_EVENTS_PER_SENDER": 2}
    for instance_id in ("a1", "a2"):
        workflows.get("awaiter").create(id=instance_id)
    workflows_env.run_until_idle()
    mallory, alice = client_of("mallory", "send_event"), client_of("alice", "send_event")
    for instance_id in ("a1", "a2"):
        url = f"/workflows/awaiter/instances/{instance_id}/events/"
        assert [mallory.post(url + "noise/", {}, format="json").status_code for _ in range(3)] == [202, 202, 429]
        assert alice.post(url + "go/", {}, format="json").status_code == 202  # waited for: taken
    # A sender who filled its own share is refused even the waited-for type.
    assert refusal(mallory.post("/workflows/awaiter/instances/a1/events/go/", {}, format="json")) == (
        429, "inbox_full")


def test_the_admin_shows_and_discards_pending_events_with_the_audit(refund, client):
    mallory = client_of("mallory", "send_event")
    for n in range(3):
        note(mallory, n)
    refund.send_event("note", {"text": "kept"})
    staff = User.objects.create_superuser("staff", "s@example.com", "pw")
    client.force_login(staff)
    page = client.get(reverse("admin:django_workflows_instance_change", args=[refund.pk]))
    url = reverse("admin:django_workflows_instance_discard_events", args=[refund.pk])
    assert page.status_code == 200 and url.encode() in page.content
    first = Event.objects.filter(sender="api:mallory").order_by("id").first()
    response = client.post(url, {"event": first.pk})
    assert response.status_code == 302
    assert Event.objects.filter(sender="api:mallory").count() == 2
    client.post(url, {"sender": "api:mallory"})
    assert list(Event.objects.values_list("sender", flat=True)) == [""]
    logged = list(LogEntry.objects.order_by("id").values_list("change_message", flat=True))
    assert logged == [f"Discarded event #{first.pk} 'note' from 'api:mallory'.",
                      "Discarded 2 events from 'api:mallory'."]
    # Room again for the sender whose events were discarded.
    assert note(mallory).status_code == 202


def test_discarding_needs_the_change_permission_and_a_post(refund, client):
    refund.send_event("note", {"text": "kept"})
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_instance"))
    client.force_login(viewer)
    url = reverse("admin:django_workflows_instance_discard_events", args=[refund.pk])
    assert client.post(url, {"sender": ""}).status_code == 403
    assert client.get(url).status_code == 405
    client.force_login(User.objects.create_superuser("staff", "s@example.com", "pw"))
    assert client.post(url, {"event": "not a number"}).status_code == 400
    assert client.post(url, {}).status_code == 400
    assert Event.objects.count() == 1 and not LogEntry.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_senders_at_once_never_store_more_than_the_quota(workflows_env, settings):
    # Eight threads send at once to one instance, as one person: the locked read of the instance orders
    # them, and each one's count of the inbox sees the events stored before it, so exactly the quota's
    # events are stored and the rest refused, however the requests interleave.
    import threading

    from django.db import connections

    settings.DJANGO_WORKFLOWS = {"MAX_PENDING_EVENTS_PER_SENDER": 5}
    workflows.get("awaiter").create(id="busy")
    workflows_env.run_until_idle()
    user = User.objects.create_user("mallory", password="pw")
    user.user_permissions.set(Permission.objects.filter(codename__in=["send_event"]))
    handle = workflows.get("awaiter").get("busy")
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def send() -> None:
        try:
            start.wait()
            for n in range(3):
                try:
                    handle.send_event("noise", {"n": n}, channel="api", user=user)
                    outcomes.append("stored")
                except InboxFull as refused:
                    outcomes.append(refused.quota)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["sender"] * 19 + ["stored"] * 5
    assert Event.objects.filter(sender="api:mallory").count() == 5


def test_a_refusal_whose_events_went_meanwhile_still_names_a_quota(workflows_env):
    # The INSERT found the inbox full; an event discarded before the recount (the admin's discard locks
    # the events, not the instance) leaves none reached: the nearest is named, not an error (a 500).
    from django_workflows.store import inbox

    handle = workflows.get("awaiter").create(id="emptied")
    workflows_env.run_until_idle()
    pk = Instance.objects.get(instance_id="emptied").pk
    Event.objects.create(instance_id=pk, type="noise", sender="api:mallory", received_at=workflows_env.now)
    reached = inbox._refusal(pk, "api:mallory", "noise", [("sender", 3), ("type", 2), ("total", 10)])
    assert reached == inbox.QuotaReached("type", 2)
    assert handle.status()["status"] == "waiting"
