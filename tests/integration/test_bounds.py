"""Bounds: an instance's inbox holds at most MAX_PENDING_EVENTS unconsumed events (but those it waits
for), and the instance detail pages its steps and events instead of returning them all."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.errors import InboxFull
from django_workflows.models import Event


@pytest.fixture
def api(workflows_env):
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    return client


def test_a_full_inbox_refuses_the_next_event_with_429_and_stores_nothing(api, workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"MAX_PENDING_EVENTS": 3}
    handle = workflows.get("awaiter").create(id="a1")
    workflows_env.run_until_idle()
    for n in range(3):
        assert api.post("/workflows/awaiter/instances/a1/events/noise/", {"n": n}, format="json").status_code == 202
    response = api.post("/workflows/awaiter/instances/a1/events/other/", {}, format="json")
    assert response.status_code == 429, response.content
    assert response.json()["error"]["code"] == "inbox_full"
    assert "MAX_PENDING_EVENTS" in response.json()["error"]["message"]
    with pytest.raises(InboxFull):
        handle.send_event("other")
    assert Event.objects.count() == 3
    assert handle.status()["status"] == "waiting"
    # The type the instance waits for is not refused because the inbox is full (tests/integration/
    # test_inbox_quotas.py has the rest of the quotas).
    assert api.post("/workflows/awaiter/instances/a1/events/go/", {}, format="json").status_code == 202


def test_consumed_events_do_not_count_toward_the_bound(api, workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"MAX_PENDING_EVENTS": 1}
    handle = workflows.get("two-waits").create(id="t1")
    workflows_env.run_until_idle()
    handle.send_event("tick", 1)
    workflows_env.run_until_idle()  # consumed by the first wait
    handle.send_event("tick", 2)
    workflows_env.run_until_idle()
    assert handle.status()["status"] == "complete"


@pytest.fixture
def long_instance(api, workflows_env):
    handle = workflows.get("loop").create(id="l1", params={"n": 250, "then_sleep": True})
    workflows_env.run_until_idle()
    for n in range(120):
        handle.send_event("noise", n)
    return handle


def test_the_instance_detail_pages_its_steps_and_events(api, long_instance):
    first = api.get("/workflows/loop/instances/l1/").json()
    assert len(first["steps"]) == 100 and len(first["events"]) == 100
    assert first["pages"] == {"per_page": 100, "steps": {"page": 1, "pages": 3, "count": 251},
                              "events": {"page": 1, "pages": 2, "count": 120}}
    last = api.get("/workflows/loop/instances/l1/?steps_page=3&events_page=2").json()
    assert [step["key"] for step in last["steps"]][-2:] == ["item-250", "rest-1"]
    assert [event["payload"] for event in last["events"]] == list(range(100, 120))
    small = api.get("/workflows/loop/instances/l1/?per_page=10&steps_page=2").json()
    assert [step["key"] for step in small["steps"]] == [f"item-{n}" for n in range(11, 21)]


def test_the_instance_detail_costs_the_same_queries_whatever_the_journals_size(api, long_instance, workflows_env):
    workflows.get("loop").create(id="small", params={"n": 2})
    workflows_env.run_until_idle()
    counts = []
    for instance_id in ("small", "l1"):
        with CaptureQueriesContext(connection) as queries:
            assert api.get(f"/workflows/loop/instances/{instance_id}/").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


@pytest.mark.parametrize("query", ["steps_page=0", "events_page=x", "per_page=1001", "steps_page=%C2%B2"])
def test_a_bad_page_is_a_400(api, long_instance, query):
    response = api.get(f"/workflows/loop/instances/l1/?{query}")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_page"
