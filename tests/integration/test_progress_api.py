"""An instance's progress through the API: the latest in its detail, and its stream of server-sent events
(status and progress until it ends), answered exactly as the detail is to whoever may not see it."""

import json
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import AsyncClient
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Step, StepKind
from tests.tenancy import SETTINGS, make_tenants

INLINE = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


def viewer(username="viewer") -> User:
    user = User.objects.create(username=username, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_instance"))
    return user


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def parse(chunks) -> list[tuple[str, dict | None, str | None]]:
    """The stream as ``(event, data, id)``; comments and the retry line left out."""
    events = []
    for block in "".join(chunks).split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return events


def read(response) -> list:
    return parse(chunk.decode() for chunk in response.streaming_content)


def test_the_detail_gives_the_latest_progress(workflows_env):
    instance = workflows.get("reporting").create(id="r1", params={"parts": 2})
    client = client_for(viewer())
    assert client.get("/workflows/reporting/instances/r1/").json()["progress"] is None
    workflows_env.run_until_idle()
    progress = client.get("/workflows/reporting/instances/r1/").json()["progress"]
    assert progress["value"] == {"done": 2, "total": 2}
    assert progress["at"].startswith(instance.progress()["at"].isoformat()[:19])


def test_the_stream_of_an_ended_instance_gives_its_latest_progress_and_its_end(workflows_env):
    workflows.get("reporting").create(id="r1", params={"parts": 2})
    workflows_env.run_until_idle()
    response = client_for(viewer()).get("/workflows/reporting/instances/r1/stream/",
                                        HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    events = read(response)
    assert [kind for kind, _, _ in events] == ["progress", "status"]
    assert events[0][1]["value"] == {"done": 2, "total": 2}
    assert events[1][1] == {"status": "complete", "output": {"parts": 2}, "error": None}


def test_a_reconnecting_stream_goes_on_after_the_last_event_id(workflows_env):
    instance = workflows.get("reporting").create(id="r1", params={"parts": 3})
    workflows_env.run_until_idle()
    ids = list(Step.objects.filter(instance_id=instance.pk, kind=StepKind.PROGRESS).order_by("id")
               .values_list("id", flat=True))
    response = client_for(viewer()).get("/workflows/reporting/instances/r1/stream/", HTTP_LAST_EVENT_ID=str(ids[1]))
    events = read(response)
    assert [(kind, data.get("value"), event_id) for kind, data, event_id in events if kind == "progress"] == [
        ("progress", {"done": 2, "total": 3}, str(ids[2])), ("progress", {"done": 3, "total": 3}, str(ids[3]))]


@pytest.mark.parametrize("bad", ["x", "-1", "1.5", "9" * 30])
def test_a_last_event_id_it_cannot_take_is_a_clear_400(workflows_env, bad):
    workflows.get("reporting").create(id="r1")
    response = client_for(viewer()).get("/workflows/reporting/instances/r1/stream/", HTTP_LAST_EVENT_ID=bad)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_last_event_id" and "Last-Event-ID must be" in error["message"]


def test_the_stream_is_refused_as_the_detail_is(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = SETTINGS
    members = make_tenants()
    workflows.get("approval").create(id="theirs", params={"tenant": "b"})
    client = client_for(members["a"])
    stream = client.get("/workflows/approval/instances/theirs/stream/", HTTP_ACCEPT="text/event-stream")
    detail = client.get("/workflows/approval/instances/theirs/")
    missing = client.get("/workflows/approval/instances/never-created/stream/")
    assert stream.status_code == detail.status_code == missing.status_code == 404
    assert stream["Content-Type"] == "application/json"
    assert stream.json()["error"]["code"] == detail.json()["error"]["code"] == "instance_not_found"
    assert client_for(members["b"]).get("/workflows/approval/instances/theirs/stream/").status_code == 200
    assert APIClient().get("/workflows/approval/instances/theirs/stream/").status_code in (401, 403)


def test_the_stream_follows_the_instance_until_it_ends(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE
    instance = workflows.get("reporting").create(id="r1", params={"parts": 2, "wait": True})
    response = client_for(viewer()).get("/workflows/reporting/instances/r1/stream/")
    chunks = iter(response.streaming_content)
    seen: list[str] = []

    def next_events(count):
        """The events so far, once ``count`` have come; a replay seen running (on PostgreSQL its progress wakes
        the stream at once) left out."""
        deadline = time.monotonic() + 20
        while len(shown()) < count and time.monotonic() < deadline:
            seen.append(next(chunks).decode())
        return shown()

    def shown():
        return [(kind, data, event_id) for kind, data, event_id in parse(seen)
                if not (kind == "status" and data["status"] == "running")]

    first = next_events(2)
    assert [(kind, data.get("value", data.get("status"))) for kind, data, _ in first] == [
        ("progress", {"done": 1, "total": 2}), ("status", "waiting")]

    def go():
        try:
            instance.send_event(type="go")
        finally:
            connection.close()

    sender = threading.Thread(target=go)
    sender.start()
    sender.join()
    events = next_events(4)
    assert [(kind, data.get("value", data.get("status"))) for kind, data, _ in events[2:]] == [
        ("progress", {"done": 2, "total": 2}), ("status", "complete")]
    assert list(chunks) == []  # the stream ended with the instance
    response.close()


def test_under_asgi_the_stream_waits_in_the_event_loop(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE
    workflows.get("reporting").create(id="r1", params={"parts": 1})
    user = viewer()
    client = AsyncClient()
    client.force_login(user)

    async def stream():
        response = await client.get("/workflows/reporting/instances/r1/stream/", HTTP_ACCEPT="text/event-stream")
        assert response.is_async
        return [chunk.decode() async for chunk in response.streaming_content]

    events = parse(async_to_sync(stream)())
    assert [(kind, data.get("value", data.get("status"))) for kind, data, _ in events] == [
        ("progress", {"done": 1, "total": 1}), ("status", "complete")]


def test_the_admin_instance_page_shows_the_latest_progress_and_each_marker(workflows_env, admin_client):
    instance = workflows.get("reporting").create(id="r1", params={"parts": 4, "wait": True})
    workflows_env.run_until_idle()
    page = admin_client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert '<div class="dw-progress-fact"><dt>Progress</dt>' in page
    assert '<progress value="0.25" max="1">25%</progress>' in page
    assert "<code>{&quot;done&quot;: 1, &quot;total&quot;: 4}</code>" in page
    assert "<code>progress(1)</code> reported progress" in page and "<code>progress(2)</code> reported progress" in page


def test_the_admin_instance_page_of_an_instance_without_progress_says_nothing_of_it(workflows_env, admin_client):
    instance = workflows.get("approval").create(id="a1")
    workflows_env.run_until_idle()
    page = admin_client.get(f"/admin/django_workflows/instance/{instance.pk}/change/").content.decode()
    assert "dw-progress-fact" not in page and "reported progress" not in page
