"""Instances bound to the rows they are about (``create(subject=...)``, ``for_subject``) and tags they are
searched by (``create(tags=...)``, ``step.set_tags`` from a ``def run`` and an ``async def run``, journaled
so every replay sets the same), on the database itself: SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.errors import InvalidSubject, InvalidTags
from django_workflows.models import Instance, InstanceTag, Step, StepKind, with_tags
from django_workflows.store import tags as instance_tags
from django_workflows.testing import verify_journal

pytestmark = pytest.mark.django_db(transaction=True)


class Tagging(WorkflowEntrypoint):
    name = "tagging"

    def run(self, event, step):
        step.do("reserve", lambda: "reserved")
        step.set_tags(stage="reserved", region=event.payload.get("region"))
        approval = step.wait_for_event("approve", "approve", timeout="1 day")
        step.set_tags({"stage": approval.payload["stage"]}, draft=None)
        return step.do("close", lambda: "closed")


class AsyncTagging(WorkflowEntrypoint):
    name = "async-tagging"

    async def run(self, event, step):
        await step.do("reserve", lambda: "reserved")
        step.set_tags(stage="reserved", region=event.payload.get("region"))
        approval = await step.wait_for_event("approve", "approve", timeout="1 day")
        step.set_tags({"stage": approval.payload["stage"]}, draft=None)
        return await step.do("close", lambda: "closed")


class BadTags(WorkflowEntrypoint):
    name = "bad-tags"

    def run(self, event, step):
        try:
            step.set_tags(amount=12)
        except InvalidTags as exc:
            return str(exc)
        return "accepted"


CLASSES = (Tagging, AsyncTagging, BadTags)
for _cls in CLASSES:
    registry.unregister(_cls)


@pytest.fixture
def deployed():
    for cls in CLASSES:
        registry.register(cls)
    yield
    for cls in CLASSES:
        registry.unregister(cls)


def tags_of(handle) -> dict[str, str]:
    return instance_tags.of(handle.pk)


# -- subjects --------------------------------------------------------------------------------------------

def test_an_instance_is_bound_to_its_subject_and_found_by_it(workflows_env, deployed):
    order, other = Group.objects.create(name="order 42"), Group.objects.create(name="order 43")
    bound = workflows.get("bad-tags").create(id="about-42", subject=order)
    workflows.get("bad-tags").create(id="about-43", subject=other)
    workflows.get("bad-tags").create(id="about-nothing")
    row = Instance.objects.get(pk=bound.pk)
    assert row.subject == order
    assert (row.subject_type.model, row.subject_id) == ("group", str(order.pk))
    assert list(Instance.objects.for_subject(order).values_list("instance_id", flat=True)) == ["about-42"]
    assert list(Instance.objects.for_subject(f"auth.group:{order.pk}").values_list("instance_id", flat=True)) == [
        "about-42"]
    # A deleted row's instances are still found by its reference, and keep theirs.
    order_pk = order.pk
    order.delete()
    assert Instance.objects.for_subject(f"auth.Group:{order_pk}").get().instance_id == "about-42"


@pytest.mark.parametrize("subject, says", [
    (Group(name="unsaved"), "has not been saved"),
    (42, "must be a saved model instance"),
    ({"pk": 1}, "must be a saved model instance"),
])
def test_a_subject_that_is_not_a_saved_row_is_refused_and_nothing_is_created(workflows_env, deployed, subject,
                                                                              says):
    with pytest.raises(InvalidSubject, match=says):
        workflows.get("bad-tags").create(id="refused", subject=subject)
    assert not Instance.objects.filter(instance_id="refused").exists()


@pytest.mark.parametrize("reference", ["auth.group", "group:1", "auth.nosuchmodel:1", ":1", "auth.group:", 7])
def test_a_reference_that_names_no_model_is_refused_with_its_form(reference):
    with pytest.raises(InvalidSubject, match="app_label.model:pk"):
        Instance.objects.for_subject(reference)


# -- tags at create --------------------------------------------------------------------------------------

def test_tags_given_at_create_are_stored_and_filter_the_instances(workflows_env, deployed):
    handle = workflows.get("bad-tags").create(id="acme-eu", tags={"tenant": "acme", "region": "eu"})
    workflows.get("bad-tags").create(id="acme-us", tags={"tenant": "acme", "region": "us"})
    workflows.get("bad-tags").create(id="globex", tags={"tenant": "globex"})
    assert tags_of(handle) == {"region": "eu", "tenant": "acme"}
    ids = lambda rows: sorted(rows.values_list("instance_id", flat=True))  # noqa: E731
    assert ids(Instance.objects.tagged({"tenant": "acme"})) == ["acme-eu", "acme-us"]
    assert ids(Instance.objects.tagged({"tenant": "acme", "region": "us"})) == ["acme-us"]
    assert ids(Instance.objects.filter(with_tags({"tenant": "globex"}) | with_tags({"region": "eu"}))) == [
        "acme-eu", "globex"]
    assert Instance.objects.tagged({"tenant": "initech"}).count() == 0


@pytest.mark.parametrize("tags, says", [
    (["tenant"], "must be a dict"),
    ({"": "acme"}, "is not a tag key"),
    ({"ten ant": "acme"}, "is not a tag key"),
    ({"tenant=x": "acme"}, "is not a tag key"),
    ({"-tenant": "acme"}, "is not a tag key"),
    ({"k" * 65: "acme"}, "is not a tag key"),
    ({"tenant": 7}, r"pass str\(7\)"),
    ({"tenant": None}, "NoneType"),
    ({"tenant": ""}, "1 to 255"),
    ({"tenant": "x" * 256}, "1 to 255"),
    ({"tenant": "line\nbreak"}, "control characters"),
    ({f"k{n}": "v" for n in range(33)}, "at most 32 tags"),
])
def test_tags_it_cannot_take_are_refused_and_nothing_is_created(workflows_env, deployed, tags, says):
    with pytest.raises(InvalidTags, match=says):
        workflows.get("bad-tags").create(id="refused", tags=tags)
    assert not Instance.objects.filter(instance_id="refused").exists()
    assert not InstanceTag.objects.exists()


# -- step.set_tags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tagging", "async-tagging"])
def test_set_tags_from_run_is_journaled_and_a_replay_sets_the_same(workflows_env, deployed, name):
    handle = workflows.get(name).create(id="t", params={"region": "eu"}, tags={"tenant": "acme", "draft": "yes"})
    workflows_env.run_until_idle()
    assert tags_of(handle) == {"draft": "yes", "region": "eu", "stage": "reserved", "tenant": "acme"}
    markers = list(Step.objects.filter(instance_id=handle.pk, kind=StepKind.TAGS).values_list("key", "result"))
    assert markers == [("set_tags(1)", {"tags": {"stage": "reserved", "region": "eu"}, "after_steps": 1})]

    # Someone changes a tag by hand meanwhile: the replays after the event do not set the journaled
    # tags again (the marker answers), and the second call, on new ground, sets and removes its own.
    InstanceTag.objects.filter(instance_id=handle.pk, key="stage").update(value="by hand")
    handle.send_event(type="approve", payload={"stage": "approved"})
    workflows_env.run_until_idle()
    assert handle.status()["status"] == "complete"
    assert tags_of(handle) == {"region": "eu", "stage": "approved", "tenant": "acme"}
    assert list(Step.objects.filter(instance_id=handle.pk, kind=StepKind.TAGS).values_list("key", flat=True)) == [
        "set_tags(1)", "set_tags(2)"]
    # Markers take no position among the steps: the journal verifies, and a restart from a step runs.
    assert verify_journal(handle) is None
    handle.restart(from_step="close")
    workflows_env.run_until_idle()
    assert handle.status()["status"] == "complete"


def test_a_tag_run_cannot_take_is_an_error_run_may_catch(workflows_env, deployed):
    handle = workflows.get("bad-tags").create(id="bad")
    workflows_env.run_until_idle()
    assert "pass str(12)" in handle.status()["output"]
    assert not InstanceTag.objects.exists()


def acme_only(user, action):
    """An ``INSTANCE_ACCESS`` rule on tags, as docs/how-to/tenancy.md shows one."""
    return with_tags({"tenant": "acme"})


def test_a_tenancy_rule_may_filter_on_tags(workflows_env, deployed, settings, django_user_model):
    from django_workflows.shared import workflow_access as access

    workflows.get("bad-tags").create(id="ours", tags={"tenant": "acme", "region": "eu"})
    workflows.get("bad-tags").create(id="theirs", tags={"tenant": "globex", "region": "eu"})
    user = django_user_model.objects.create_user("ann", is_staff=True)
    settings.DJANGO_WORKFLOWS = {"INSTANCE_ACCESS": f"{__name__}.acme_only"}
    visible = access.scope(Instance.objects.tagged({"region": "eu"}), user, access.VIEW)
    assert list(visible.values_list("instance_id", flat=True)) == ["ours"]
    assert visible.count() == 1


def test_retention_deletes_an_instances_tags_with_it(workflows_env, deployed):
    from django_workflows.store import retention

    handle = workflows.get("bad-tags").create(id="gone", tags={"tenant": "acme"})
    workflows_env.run_until_idle()
    due = Instance.objects.filter(pk=handle.pk)
    assert retention.delete_finished([handle.pk], due) == 1
    assert not InstanceTag.objects.exists()
