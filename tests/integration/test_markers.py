"""The markers a replay journals beside its steps (``step.patched``'s, ``set_tags``'s, ``progress``'s) are
written by one writer, ``engine.markers.MarkerWriter``: so a verification, which writes nothing, leaves out
all three kinds alike."""

from __future__ import annotations

import pytest

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.models import Step
from django_workflows.testing import verify_journal


class Before(WorkflowEntrypoint):
    name = "marked"

    def run(self, event, step):
        step.do("fetch", lambda: 1)
        step.sleep("nap", "1 hour")
        return "done"


class After(WorkflowEntrypoint):
    """Before, deployed again with a marker of each kind between its steps."""

    name = "marked"

    def run(self, event, step):
        step.do("fetch", lambda: 1)
        step.progress({"done": 1, "total": 2})
        step.set_tags(stage="fetched")
        step.patched("nap-later")
        step.sleep("nap", "1 hour")
        return "done"


# Two versions of one workflow: registered by the test that deploys one, as a deploy replaces the other.
for _cls in (Before, After):
    registry.unregister(_cls)


@pytest.fixture
def deploy():
    def to(cls: type[WorkflowEntrypoint]) -> None:
        for other in (Before, After):
            registry.unregister(other)
        registry.register(cls)

    yield to
    for other in (Before, After):
        registry.unregister(other)


def test_verifying_writes_no_marker_of_any_kind(workflows_env, deploy):
    deploy(Before)
    instance = workflows.get("marked").create(id="old")
    workflows_env.run_until_idle()
    deploy(After)
    rows = Step.objects.filter(instance_id=instance.pk).count()

    assert verify_journal(instance) is None
    assert Step.objects.filter(instance_id=instance.pk).count() == rows


def test_a_replay_writes_each_marker_once(workflows_env, deploy):
    deploy(After)
    instance = workflows.get("marked").create(id="new")
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    workflows_env.run_until_idle()

    assert instance.status()["status"] == "complete"
    kinds = sorted(Step.objects.filter(instance_id=instance.pk).exclude(kind__in=("do", "sleep"))
                   .values_list("kind", flat=True))
    assert kinds == ["patch", "progress", "tags"]
