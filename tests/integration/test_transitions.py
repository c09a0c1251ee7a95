"""The transitions table is the state machine every surface reads: what it says applies, applies, and
nothing else does, and each surface offers exactly its changes."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_workflows import workflows
from django_workflows.api.serializers import StatusChangeSerializer
from django_workflows.errors import InvalidTransition
from django_workflows.models import Instance, InstanceStatus
from django_workflows.shared.transitions import TRANSITIONS, offered


def _instance_in(status):
    handle = workflows.get("three-steps").create(id=f"in-{status}")
    Instance.objects.filter(pk=handle.pk).update(status=status)
    return handle


@pytest.mark.parametrize("status", list(InstanceStatus))
@pytest.mark.parametrize("action", list(TRANSITIONS))
def test_a_change_applies_exactly_where_the_table_says(workflows_env, action, status):
    handle = _instance_in(status)
    transition = TRANSITIONS[action]
    if transition.applies(status):
        getattr(handle, action)()
        assert handle.status()["status"] != status or action == "restart" and status == "queued"
    else:
        with pytest.raises(InvalidTransition) as refused:
            getattr(handle, action)()
        assert refused.value.status == status and refused.value.action == action
        for allowed in transition.applies_to:
            assert allowed in str(refused.value)
        assert handle.status()["status"] == status


def test_the_api_accepts_the_table_actions_and_nothing_else():
    assert set(StatusChangeSerializer().fields["status"].choices) == set(TRANSITIONS)
    assert not StatusChangeSerializer(data={"status": "complete"}).is_valid()


def test_the_cli_has_a_subcommand_per_action(workflows_env, capsys):
    handle = _instance_in(InstanceStatus.WAITING)
    for action in ("pause", "resume", "terminate"):
        call_command("workflows", "instances", action, "three-steps", handle.id)
    assert handle.status()["status"] == "terminated"
    with pytest.raises(CommandError, match="pause applies to an instance that is queued or running or waiting"):
        call_command("workflows", "instances", "pause", "three-steps", handle.id)


def test_the_admin_offers_the_buttons_of_the_status():
    assert [t.action for t in offered(InstanceStatus.RUNNING)] == ["pause", "terminate", "restart"]
    assert [t.action for t in offered(InstanceStatus.COMPLETE)] == ["restart"]
    assert [t.action for t in offered(InstanceStatus.PAUSED)] == ["resume", "terminate", "restart"]
