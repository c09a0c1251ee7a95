"""Subjects and tags on every surface: the API (subject in answers, ?subject= and ?tag.<key>= on lists,
tags on create), the CLI (--subject, --tag), the admin (an object's WorkflowInstancesInline, the list's
tag and subject filters), each narrowed by the tenancy rule as everything else is."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.store import tags as instance_tags
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


@pytest.fixture
def bound(workflows_env):
    """Three instances of ``refund``: two about one row, tagged by tenant, one about nothing."""
    order, other = SideEffect.objects.create(name="order 1"), SideEffect.objects.create(name="order 2")
    handle = workflows.get("refund")
    handle.create(id="acme-1", params={"amount": 1}, subject=order, tags={"tenant": "acme", "region": "eu"})
    handle.create(id="acme-2", params={"amount": 2}, subject=other, tags={"tenant": "acme", "region": "us"})
    handle.create(id="globex", params={"amount": 3}, tags={"tenant": "globex"})
    return order


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(row["id"] for row in response.json()["results"])


def test_the_api_filters_lists_by_subject_and_tags_and_shows_them(api, bound):
    base = "/workflows/refund/instances/"
    assert ids(api.get(base, {"subject": f"testapp.sideeffect:{bound.pk}"})) == ["acme-1"]
    assert ids(api.get(base, {"tag.tenant": "acme"})) == ["acme-1", "acme-2"]
    assert ids(api.get(base, {"tag.tenant": "acme", "tag.region": "us"})) == ["acme-2"]
    assert ids(api.get(base, {"tag.tenant": "initech"})) == []
    [row] = api.get(base, {"subject": f"testapp.sideeffect:{bound.pk}"}).json()["results"]
    assert row["subject"] == f"testapp.sideeffect:{bound.pk}"
    detail = api.get(f"{base}acme-1/").json()
    assert (detail["subject"], detail["tags"]) == (f"testapp.sideeffect:{bound.pk}", {"region": "eu", "tenant": "acme"})
    assert api.get(f"{base}globex/").json()["subject"] is None


@pytest.mark.parametrize("query, code", [
    ({"subject": "sideeffect:1"}, "invalid_subject"),
    ({"subject": "testapp.nosuchmodel:1"}, "invalid_subject"),
    ({"tag.ten ant": "acme"}, "invalid_tags"),
    ({"tag.tenant": "x" * 256}, "invalid_tags"),
])
def test_the_api_refuses_a_filter_it_cannot_read_with_a_400(api, bound, query, code):
    response = api.get("/workflows/refund/instances/", query)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code


def test_the_api_creates_an_instance_with_tags_and_refuses_bad_ones(api, workflows_env):
    created = api.post("/workflows/refund/instances/", {"instance_id": "t", "params": {"amount": 1},
                                                       "tags": {"tenant": "acme"}}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["tags"] == {"tenant": "acme"}
    refused = api.post("/workflows/refund/instances/", {"instance_id": "u", "tags": {"tenant": 7}}, format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_tags")
    assert not Instance.objects.filter(instance_id="u").exists()


def cli(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def test_the_cli_filters_by_subject_and_tags_and_triggers_with_tags(bound):
    listed = json.loads(cli("instances", "list", "refund", "--tag", "tenant=acme", "--json"))
    assert sorted(row["id"] for row in listed) == ["acme-1", "acme-2"]
    listed = json.loads(cli("instances", "list", "refund", "--subject", f"testapp.sideeffect:{bound.pk}", "--json"))
    assert [row["id"] for row in listed] == ["acme-1"]
    assert "region=eu, tenant=acme" in cli("instances", "describe", "refund", "acme-1")
    cli("trigger", "refund", '{"amount": 4}', "--id", "tagged", "--tag", "tenant=initech")
    assert instance_tags.of(Instance.objects.get(instance_id="tagged").pk) == {"tenant": "initech"}


@pytest.mark.parametrize("args", [("--tag", "tenant"), ("--tag", "ten ant=x"), ("--subject", "nope")])
def test_the_cli_refuses_a_filter_it_cannot_read(bound, args):
    with pytest.raises(CommandError, match="KEY=VALUE|tag key|app_label.model:pk"):
        cli("instances", "list", "refund", *args)


def test_an_objects_admin_page_shows_its_instances_with_status_and_link(client, bound):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    page = client.get(f"/admin/testapp/sideeffect/{bound.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    acme_1 = Instance.objects.get(instance_id="acme-1")
    assert f'href="/admin/django_workflows/instance/{acme_1.pk}/change/"' in text
    assert "acme-1" in text and "acme-2" not in text and "globex" not in text
    assert f"dw-status-{acme_1.status}" in text


def test_the_admin_list_filters_by_tag_and_subject(client, bound):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    listed = client.get("/admin/django_workflows/instance/", {"tag": "tenant=acme"}).content.decode()
    assert ">acme-1<" in listed and ">acme-2<" in listed and ">globex<" not in listed
    assert "tenant=globex" in listed  # offered as a choice of the filter
    listed = client.get("/admin/django_workflows/instance/",
                        {"subject": f"testapp.sideeffect:{bound.pk}"}).content.decode()
    assert ">acme-1<" in listed and ">acme-2<" not in listed
    refused = client.get("/admin/django_workflows/instance/", {"tag": "tenant"}, follow=True)
    assert refused.status_code == 200
    assert "KEY=VALUE" in refused.content.decode() and ">acme-1<" not in refused.content.decode()
