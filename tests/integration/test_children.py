"""step.child: a parent starts a child workflow and durably waits for its end (its output, or its error
raised in the parent with its class); the end is sent in the transaction that ends the child, buffered
if the parent is not waiting yet; creation is idempotent across a crash; the parent's terminate,
terminate-with-rollback and restart reach its running children by their policy."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.db import DatabaseError

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.children import ChildSteps
from django_workflows.definition import registry
from django_workflows.errors import InstanceTerminated, InvalidEventType
from django_workflows.models import Event, Instance, Step
from django_workflows.store import children as children_store
from django_workflows.store import steering
from django_workflows.store.dispatch import sweep
from django_workflows.validation import INSTANCE_ID_PATTERN
from tests.testapp.workflows import SimulatedCrash


class KidFailed(Exception):
    pass


class Kid(WorkflowEntrypoint):
    name = "kid"

    def run(self, event, step):
        params = event.payload
        if params.get("wait"):
            step.wait_for_event("go", "go")
        value = step.do("work", lambda: params["n"] * 2)
        if params.get("fail"):
            raise KidFailed(f"the kid failed at {value}")
        return {"double": value}


def _parent_body(step, params):
    try:
        got = step.child("kid", "kid", params["kid"], on_parent_end=params.get("policy", "terminate"))
    except KidFailed as exc:
        return {"caught": str(exc)}
    except InstanceTerminated as exc:
        return {"terminated": str(exc)}
    return {"got": got}


class Parent(WorkflowEntrypoint):
    name = "parent"
    # Declared events: the child's end is none of them, and still arrives.
    events = {"nudge": {}}

    def run(self, event, step):
        return _parent_body(step, event.payload)


class AsyncParent(WorkflowEntrypoint):
    name = "async-parent"

    async def run(self, event, step):
        params = event.payload
        # Called before the wait for "go": the child is created in the first round, and may end before
        # the parent awaits it.
        kid = step.child("kid", "kid", params["kid"])
        if params.get("go_first"):
            await step.wait_for_event("go", "go")
        try:
            first, second = await asyncio.gather(kid, step.child("kid", "kid", {"n": 100}))
        except KidFailed as exc:
            return {"caught": str(exc)}
        return {"got": [first, second]}


# Only this module's tests see them: the API's schema lists every registered workflow's declared events,
# and the schema test expects the test app's alone.
WORKFLOWS = (Kid, Parent, AsyncParent)
for _workflow in WORKFLOWS:
    registry.unregister(_workflow)


@pytest.fixture(autouse=True)
def _registered():
    for workflow in WORKFLOWS:
        registry.register(workflow)
    yield
    for workflow in WORKFLOWS:
        registry.unregister(workflow)


def kids():
    return Instance.objects.filter(workflow_name="kid").order_by("id")


def only_kid():
    (kid,) = kids()
    return kid


def kid_handle():
    return workflows.get("kid").get(only_kid().instance_id)


def start(params, workflow="parent", id="p1"):
    return workflows.get(workflow).create(id=id, params=params)


def test_the_parent_gets_the_childs_output(workflows_env):
    parent = start({"kid": {"n": 21}})
    workflows_env.run_until_idle()
    assert parent.status()["status"] == "complete"
    assert parent.status()["output"] == {"got": {"double": 42}}
    kid = only_kid()
    assert kid.status == "complete" and kid.parent_id == parent.pk and kid.parent_step == "kid-1"
    assert INSTANCE_ID_PATTERN.fullmatch(kid.instance_id) and kid.instance_id.startswith("p1--kid-1-")
    keys = list(Step.objects.filter(instance_id=parent.pk).order_by("id").values_list("key", "kind"))
    assert keys == [("kid-1", "do"), ("kid-1 (result)-1", "waitForEvent")]
    # The end was taken from the inbox, by the wait.
    (end,) = Event.objects.filter(instance_id=parent.pk)
    assert end.type == children_store.end_event_type(kid.pk) and end.consumed_by_id is not None


def test_the_parent_waits_holding_no_worker_until_the_child_ends(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    row = Instance.objects.get(pk=parent.pk)
    assert row.status == "waiting" and row.lease_owner == ""
    assert row.waiting_for == [children_store.end_event_type(only_kid().pk)]
    kid_handle().send_event("go")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": {"double": 2}}


def test_a_child_that_errors_raises_its_error_class_in_the_parent(workflows_env):
    parent = start({"kid": {"n": 5, "fail": True}})
    workflows_env.run_until_idle()
    assert only_kid().status == "errored"
    assert parent.status()["output"] == {"caught": "the kid failed at 10"}


def test_an_uncaught_child_error_errors_the_parent_with_that_class(workflows_env):
    class Careless(WorkflowEntrypoint):
        name = "careless-parent"

        def run(self, event, step):
            return step.child("kid", "kid", {"n": 1, "fail": True})

    parent = start(None, workflow="careless-parent")
    workflows_env.run_until_idle()
    status = parent.status()
    assert status["status"] == "errored" and status["error"]["name"] == "KidFailed"


def test_a_child_that_ends_before_the_parent_waits_is_taken_from_the_inbox(workflows_env, monkeypatch):
    real_wait = ChildSteps.wait_for_child
    crashed = []

    def crash_before_the_wait(self, *args, **kwargs):
        if not crashed:
            crashed.append(1)
            raise SimulatedCrash()
        return real_wait(self, *args, **kwargs)

    monkeypatch.setattr(ChildSteps, "wait_for_child", crash_before_the_wait)
    parent = start({"kid": {"n": 3}})
    with pytest.raises(SimulatedCrash):
        workflows_env.run_until_idle()
    # The parent's worker died after the create step; the child runs to its end meanwhile.
    workflows_env.run_until_idle()
    assert only_kid().status == "complete"
    (end,) = Event.objects.filter(instance_id=parent.pk)
    assert end.consumed_by_id is None
    assert not Step.objects.filter(instance_id=parent.pk, kind="waitForEvent").exists()
    workflows_env.clock.advance(timedelta(minutes=2))
    sweep()
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": {"double": 6}}
    end.refresh_from_db()
    assert end.consumed_by.key == "kid-1 (result)-1" and end.received_at < end.consumed_at


def test_async_children_run_while_the_parent_waits_for_something_else(workflows_env):
    parent = start({"kid": {"n": 3}, "go_first": True}, workflow="async-parent")
    workflows_env.run_until_idle()
    # The first child ran to its end while the parent waited for "go", and its end was taken.
    assert [kid.status for kid in kids()] == ["complete"]
    assert Instance.objects.get(pk=parent.pk).waiting_for == ["go"]
    assert Step.objects.get(instance_id=parent.pk, key="kid-1 (result)-1").status == "succeeded"
    parent.send_event("go")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": [{"double": 6}, {"double": 200}]}
    assert kids().count() == 2


def test_the_async_form_gets_outputs_and_errors(workflows_env):
    parent = start({"kid": {"n": 4}}, workflow="async-parent")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": [{"double": 8}, {"double": 200}]}
    failing = start({"kid": {"n": 4, "fail": True}}, workflow="async-parent", id="p2")
    workflows_env.run_until_idle()
    assert failing.status()["output"] == {"caught": "the kid failed at 8"}


def test_creation_is_idempotent_across_a_crash_before_the_create_step_is_journaled(workflows_env, monkeypatch):
    real_create = steering.insert_child
    crashed = []

    def create_then_crash(child):
        pk = real_create(child)
        if not crashed:
            crashed.append(pk)
            raise SimulatedCrash()
        return pk

    monkeypatch.setattr(steering, "insert_child", create_then_crash)
    parent = start({"kid": {"n": 7, "wait": True}})
    with pytest.raises(SimulatedCrash):
        workflows_env.run_until_idle()
    assert not Step.objects.filter(instance_id=parent.pk).exists()
    assert kids().count() == 1
    workflows_env.clock.advance(timedelta(minutes=2))
    sweep()
    workflows_env.run_until_idle()
    kid = only_kid()
    assert kid.pk == crashed[0]
    assert Step.objects.get(instance_id=parent.pk, key="kid-1").result["pk"] == kid.pk
    kid_handle().send_event("go")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": {"double": 14}}
    assert kids().count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_childs_end_and_the_event_to_its_parent_are_one_transaction(workflows_env, monkeypatch):
    real_send = children_store.send_end
    failed = []

    def send_fails_once(*args):
        if not failed:
            failed.append(1)
            raise DatabaseError("the database went away")
        return real_send(*args)

    monkeypatch.setattr(children_store, "send_end", send_fails_once)
    parent = start({"kid": {"n": 2}})
    workflows_env.run_until_idle()
    # The child's end was not written without its event: it will end again.
    assert failed and only_kid().status == "waiting" and only_kid().output is None
    workflows_env.advance("5 seconds")
    assert only_kid().status == "complete"
    assert parent.status()["output"] == {"got": {"double": 4}}


def test_terminating_the_parent_terminates_its_running_child(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    parent.terminate()
    assert only_kid().status == "terminated"
    workflows_env.run_until_idle()
    assert parent.status()["status"] == "terminated"


def test_terminating_the_parent_leaves_a_child_whose_policy_is_abandon(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}, "policy": "abandon"})
    workflows_env.run_until_idle()
    parent.terminate()
    assert only_kid().status == "waiting" and only_kid().on_parent_end == "abandon"
    kid_handle().send_event("go")
    workflows_env.run_until_idle()
    assert only_kid().status == "complete"
    assert parent.status()["status"] == "terminated"
    # The parent had ended: the child's end was not stored in its inbox.
    assert not Event.objects.filter(instance_id=parent.pk).exists()


def test_terminating_the_child_from_outside_delivers_terminated_to_the_parent(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    kid_handle().terminate()
    workflows_env.run_until_idle()
    output = parent.status()["output"]
    assert output == {"terminated": f"Instance kid/{only_kid().instance_id} was terminated."}


def test_terminating_the_parent_with_rollback_terminates_the_child_with_rollback(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    parent.terminate(rollback=True)
    assert Instance.objects.get(pk=only_kid().pk).terminating
    workflows_env.run_until_idle()
    assert only_kid().status == "terminated" and parent.status()["status"] == "terminated"


def test_restarting_the_parent_restarts_its_child_and_the_parent_waits_for_its_new_end(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    kid_handle().send_event("go")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": {"double": 2}}
    parent.restart()
    workflows_env.run_until_idle()
    # The same child, run again from the top: it waits for "go" again, and so does its parent.
    assert kids().count() == 1 and only_kid().status == "waiting"
    assert parent.status()["status"] == "waiting"
    kid_handle().send_event("go")
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"got": {"double": 2}}


def test_restarting_the_parent_takes_an_abandoned_childs_end_again(workflows_env):
    parent = start({"kid": {"n": 3, "fail": True}, "policy": "abandon"})
    workflows_env.run_until_idle()
    assert parent.status()["output"] == {"caught": "the kid failed at 6"}
    parent.restart()
    workflows_env.run_until_idle()
    assert only_kid().status == "errored" and kids().count() == 1
    # Its end, with its class, taken again from the inbox.
    assert parent.status()["output"] == {"caught": "the kid failed at 6"}


def test_the_child_end_event_type_cannot_be_sent_from_outside(workflows_env):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    with pytest.raises(InvalidEventType):
        parent.send_event(children_store.end_event_type(only_kid().pk), {"status": "complete", "output": 1})
    assert not Event.objects.filter(instance_id=parent.pk).exists()


def test_the_api_refuses_the_child_end_event_type(workflows_env, admin_client):
    parent = start({"kid": {"n": 1, "wait": True}})
    workflows_env.run_until_idle()
    event_type = children_store.end_event_type(only_kid().pk)
    response = admin_client.post(f"/workflows/parent/instances/p1/events/{event_type}/",
                                 {"status": "complete", "output": 1}, content_type="application/json")
    assert response.status_code == 400, response.content
    assert not Event.objects.filter(instance_id=parent.pk).exists()


def test_the_surfaces_show_the_parent_and_the_children(workflows_env, admin_client):
    import io

    from django.core.management import call_command

    def describe(*args):
        out = io.StringIO()
        call_command("workflows", "instances", "describe", *args, stdout=out, stderr=io.StringIO())
        return out.getvalue()

    parent = start({"kid": {"n": 1, "wait": True}, "policy": "abandon"})
    workflows_env.run_until_idle()
    kid = only_kid()
    # The admin's instance pages link both ways.
    page = admin_client.get(f"/admin/django_workflows/instance/{parent.pk}/change/").content.decode()
    assert f'href="/admin/django_workflows/instance/{kid.pk}/change/" class="dw-child-link">kid/{kid.instance_id}' in page
    page = admin_client.get(f"/admin/django_workflows/instance/{kid.pk}/change/").content.decode()
    assert f'href="/admin/django_workflows/instance/{parent.pk}/change/" class="dw-parent-link">parent/p1' in page
    # The API's detail.
    detail = admin_client.get("/workflows/parent/instances/p1/").json()
    assert detail["parent"] is None
    assert detail["children"] == [{"workflow": "kid", "id": kid.instance_id, "status": "waiting", "step": "kid-1",
                                   "on_parent_end": "abandon"}]
    detail = admin_client.get(f"/workflows/kid/instances/{kid.instance_id}/").json()
    assert detail["parent"] == {"workflow": "parent", "id": "p1", "step": "kid-1", "on_parent_end": "abandon"}
    assert detail["children"] == []
    # The command line's describe.
    out = describe("parent", "p1")
    assert f"kid/{kid.instance_id}" in out and "CHILD" in out
    assert "parent/p1, step kid-1" in describe("kid", kid.instance_id)
