"""Every way of creating an instance takes a subject and tags: ``create_batch`` (per item), the API's create
(``"subject": "app.model:pk"``, read from its table) and batch endpoints, and ``workflows trigger
--subject``. A subject that names no row refuses the whole creation, and nothing is created."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.errors import InvalidSubject, InvalidTags
from django_workflows.models import Instance
from django_workflows.store import tags as instance_tags
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(workflows_env):
    return SideEffect.objects.create(name="order 1")


@pytest.fixture
def api():
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def bound_to(row) -> list[str]:
    return sorted(Instance.objects.for_subject(row).values_list("instance_id", flat=True))


def tags_of(instance_id: str) -> dict[str, str]:
    return instance_tags.of(Instance.objects.get(instance_id=instance_id).pk)


def test_create_batch_takes_a_subject_and_tags_per_item(order):
    handle = workflows.get("refund")
    handle.create_batch([
        {"id": "a", "params": {"amount": 1}, "subject": order, "tags": {"tenant": "acme", "region": "eu"}},
        {"id": "b", "params": {"amount": 2}, "tags": {"tenant": "globex"}},
        {"id": "c", "params": {"amount": 3}},
    ])
    assert bound_to(order) == ["a"]
    assert (tags_of("a"), tags_of("b"), tags_of("c")) == ({"region": "eu", "tenant": "acme"}, {"tenant": "globex"}, {})
    assert sorted(Instance.objects.tagged({"tenant": "acme"}).values_list("instance_id", flat=True)) == ["a"]
    # The same batch again creates nothing, and the ids it skips keep the tags they were created with.
    handle.create_batch([{"id": "a", "tags": {"tenant": "initech"}}, {"id": "d", "tags": {"tenant": "initech"}}])
    assert (tags_of("a"), tags_of("d")) == ({"region": "eu", "tenant": "acme"}, {"tenant": "initech"})


@pytest.mark.parametrize("item, refusal", [
    ({"id": "bad", "tags": {"tenant": 7}}, InvalidTags),
    ({"id": "bad", "subject": "testapp.sideeffect:1"}, InvalidSubject),  # a reference is text: pass the row
])
def test_create_batch_refuses_the_whole_batch_for_one_bad_subject_or_tags(order, item, refusal):
    with pytest.raises(refusal):
        workflows.get("refund").create_batch([{"id": "good", "tags": {"tenant": "acme"}}, item])
    assert not Instance.objects.exists()


def test_the_api_creates_an_instance_bound_to_its_subject(api, order):
    created = api.post("/workflows/refund/instances/", {"instance_id": "t", "params": {"amount": 1},
                                                       "subject": f"testapp.sideeffect:{order.pk}"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["subject"] == f"testapp.sideeffect:{order.pk}"
    assert bound_to(order) == ["t"]


@pytest.mark.parametrize("reference, words", [
    ("testapp.sideeffect:{missing}", "there is no testapp.SideEffect with the primary key"),
    ("testapp.sideeffect:abc", "there is no testapp.SideEffect with the primary key 'abc'"),
    ("testapp.nosuchmodel:1", "no installed model"),
    ("sideeffect-1", "app_label.model:pk"),
])
def test_the_api_refuses_a_subject_that_names_no_row_with_a_400_and_creates_nothing(api, order, reference, words):
    reference = reference.format(missing=order.pk + 1000)
    refused = api.post("/workflows/refund/instances/", {"instance_id": "t", "subject": reference}, format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"]["code"] == "invalid_subject"
    assert words in refused.json()["error"]["message"]
    assert not Instance.objects.exists()


def test_the_api_batch_takes_subject_and_tags_per_item_and_refuses_all_for_one_missing_row(api, order):
    batch = "/workflows/refund/instances/batch/"
    created = api.post(batch, [
        {"instance_id": "a", "subject": f"testapp.sideeffect:{order.pk}", "tags": {"tenant": "acme"}},
        {"instance_id": "b", "tags": {"tenant": "globex"}},
    ], format="json")
    assert created.status_code == 201, created.content
    assert [row["subject"] for row in created.json()] == [f"testapp.sideeffect:{order.pk}", None]
    assert (bound_to(order), tags_of("a"), tags_of("b")) == (["a"], {"tenant": "acme"}, {"tenant": "globex"})
    refused = api.post(batch, [{"instance_id": "c"}, {"instance_id": "d", "subject": "testapp.sideeffect:0"}],
                       format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_subject")
    refused = api.post(batch, [{"instance_id": "c"}, {"instance_id": "d", "tags": {"tenant": ""}}], format="json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_tags")
    assert sorted(Instance.objects.values_list("instance_id", flat=True)) == ["a", "b"]


def cli(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def test_the_cli_triggers_an_instance_bound_to_its_subject(order):
    cli("trigger", "refund", '{"amount": 4}', "--id", "bound", "--subject", f"testapp.sideeffect:{order.pk}",
        "--tag", "tenant=acme")
    assert (bound_to(order), tags_of("bound")) == (["bound"], {"tenant": "acme"})
    with pytest.raises(CommandError, match="there is no testapp.SideEffect"):
        cli("trigger", "refund", "--id", "orphan", "--subject", f"testapp.sideeffect:{order.pk + 1000}")
    assert not Instance.objects.filter(instance_id="orphan").exists()
