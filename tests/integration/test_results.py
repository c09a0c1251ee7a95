"""result() and aresult(): an instance's output once it has ended, its error raised if it ended otherwise, a
timeout that changes nothing; and the handles' async twins, from async views under Django's async test
client."""

import math
import threading
import time
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test import AsyncClient

from django_workflows import (
    InstanceErrored,
    InstanceFailed,
    InstanceTerminated,
    InvalidParams,
    ResultTimeout,
    WorkflowEntrypoint,
    workflows,
)
from django_workflows.client.awaiting import RECHECK_SECONDS
from django_workflows.shared.instance_watch import InstanceWatch
from django_workflows.models import Instance

INLINE = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


class Priced(WorkflowEntrypoint):
    name = "priced"

    def run(self, event, step):
        return {"price": step.do("price", lambda: Decimal(event.payload["price"]))}


def test_the_result_of_a_complete_instance_is_its_output_with_typed_values_revived(workflows_env):
    instance = workflows.get("priced").create(params={"price": "1.50"})
    workflows_env.run_until_idle()
    output = instance.result(timeout=1)
    assert output == {"price": Decimal("1.50")} and type(output["price"]) is Decimal
    assert output == instance.status()["output"]


def test_the_result_of_an_errored_instance_raises_its_error(workflows_env):
    instance = workflows.get("uncaught").create()
    workflows_env.run_until_idle()
    with pytest.raises(InstanceErrored, match=r"ended errored \(RuntimeError: it broke\)") as raised:
        instance.result(timeout=1)
    assert isinstance(raised.value, InstanceFailed)
    assert raised.value.error["name"] == "RuntimeError" and raised.value.error["message"] == "it broke"
    assert raised.value.instance_id == instance.id


def test_the_result_of_a_terminated_instance_raises_instance_terminated(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    instance.terminate()
    with pytest.raises(InstanceTerminated, match="was terminated; it has no output") as raised:
        instance.result(timeout=1)
    assert isinstance(raised.value, InstanceFailed)


def test_a_timeout_raises_saying_where_the_instance_stands_and_changes_nothing(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    started = time.monotonic()
    with pytest.raises(ResultTimeout, match="did not end within 0.3 s: it is waiting") as raised:
        instance.result(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3
    assert isinstance(raised.value, TimeoutError) and raised.value.status == "waiting"
    assert instance.status()["status"] == "waiting"


def test_a_timeout_of_zero_looks_once(workflows_env):
    instance = workflows.get("approval").create()
    workflows_env.run_until_idle()
    with pytest.raises(ResultTimeout):
        instance.result(timeout=0)
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    workflows_env.run_until_idle()
    assert instance.result(timeout=0)["status"] == "approved"


@pytest.mark.parametrize("bad", [-1, "10", True, math.nan])
def test_a_timeout_it_cannot_take_is_refused(workflows_env, bad):
    instance = workflows.get("approval").create()
    with pytest.raises(InvalidParams, match=r"result\(timeout=\.\.\.\) takes seconds from 0"):
        instance.result(timeout=bad)


def test_a_deleted_instance_is_not_found(workflows_env):
    from django_workflows import InstanceNotFound

    instance = workflows.get("approval").create()
    Instance.objects.filter(pk=instance.pk).delete()
    with pytest.raises(InstanceNotFound):
        instance.result(timeout=1)


def test_result_wakes_when_another_thread_ends_the_instance(transactional_db, settings):
    """The end commits in another thread while result() waits: a notification wakes it on PostgreSQL (well
    before the look it makes every RECHECK_SECONDS), a poll on SQLite."""
    settings.DJANGO_WORKFLOWS = INLINE
    instance = workflows.get("approval").create()
    assert instance.status()["status"] == "waiting"

    def approve():
        time.sleep(0.3)
        try:
            instance.send_event(type="manager-approval", payload={"outcome": "approved"})
        finally:
            connection.close()

    sender = threading.Thread(target=approve)
    started = time.monotonic()
    sender.start()
    try:
        output = instance.result(timeout=20)
    finally:
        sender.join()
    assert output["status"] == "approved"
    assert time.monotonic() - started < 0.3 + RECHECK_SECONDS * 0.6


@pytest.mark.postgres
def test_the_instance_channel_names_an_instance_as_it_ends_and_as_it_reports_progress(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE
    reporting = workflows.get("reporting").create(params={"parts": 2, "wait": True})
    other = workflows.get("approval").create()
    with InstanceWatch(reporting.pk, "default") as watch, InstanceWatch(other.pk, "default") as elsewhere:
        assert watch.listening
        assert watch.wait(0.2) is False
        reporting.send_event(type="go")  # its replay reports progress, then completes
        assert watch.wait(5) is True
        assert elsewhere.wait(0.3) is False
    assert reporting.status()["status"] == "complete"


def post(path, body=None, **kwargs):
    client = AsyncClient()
    return async_to_sync(client.post)(path, data=body or {}, content_type="application/json", **kwargs)


def test_acreate_and_aresult_in_an_async_view(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE
    response = post("/async/three-steps/", {"n": 1})
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["status"] == "complete"
    assert answer["output"] == {"sum": 6, "b": {"a": 1, "b": 2}, "params": {"n": 1}}
    assert Instance.objects.get(instance_id=answer["id"]).status == "complete"


def test_an_async_view_is_told_an_instance_errored_or_is_still_waiting(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE
    errored = post("/async/uncaught/")
    assert errored.status_code == 409 and errored.json()["error"]["message"] == "it broke"
    waiting = post("/async/approval/?timeout=0.2")
    assert waiting.status_code == 504 and waiting.json()["status"] == "waiting"

    sent = post(f"/async/approval/{waiting.json()['id']}/event/",
                {"type": "manager-approval", "payload": {"outcome": "approved"}})
    assert sent.status_code == 200, sent.content
    assert sent.json()["output"]["status"] == "approved" and sent.json()["event_id"] > 0


def test_acreate_takes_every_option_create_takes(transactional_db, settings):
    """acreate() passed on only id, params, retention, subject and tags: a priority, a queue, a deadline
    or a delayed start given to it was a TypeError."""
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.testing.RecordingExecutor"}

    async def create():
        return await workflows.get("three-steps").acreate(
            id="with-options", tags={"tier": "pro"}, priority=7, queue="heavy", timeout="1 hour",
            start_in="5 minutes")

    async_to_sync(create)()
    row = Instance.objects.get(instance_id="with-options")
    assert (row.priority, row.queue, row.deadline is not None, row.status) == (7, "heavy", True, "scheduled")
    assert row.tags.get(key="tier").value == "pro"


def test_every_async_twin_does_what_its_method_does(transactional_db, settings):
    settings.DJANGO_WORKFLOWS = INLINE

    async def steer():
        workflow = workflows.get("approval")
        [first, second] = await workflow.acreate_batch([{"id": "first"}, {"id": "second"}])
        handle = await workflow.aget("first")
        seen = [(await handle.astatus())["status"]]
        await handle.apause()
        seen.append((await handle.astatus())["status"])
        await handle.aresume()
        seen.append((await handle.astatus())["status"])
        await handle.arestart()
        await second.aterminate()
        sent = await handle.asend_event(type="unwanted", payload=1)
        discarded = await handle.adiscard_events([sent.event_id])
        return seen, discarded, await handle.aprogress(), (await second.astatus())["status"]

    seen, discarded, progress, second = async_to_sync(steer)()
    assert seen == ["waiting", "paused", "waiting"]
    assert [event_type for _, event_type, _ in discarded] == ["unwanted"]
    assert progress is None
    assert second == "terminated"


def test_the_sync_create_is_refused_in_an_event_loop_and_acreate_is_not(transactional_db, settings):
    from django.core.exceptions import SynchronousOnlyOperation

    settings.DJANGO_WORKFLOWS = INLINE

    async def both():
        with pytest.raises(SynchronousOnlyOperation):
            workflows.get("three-steps").create(id="sync")
        created = await workflows.get("three-steps").acreate(id="async")
        return await created.aresult(timeout=5)

    assert async_to_sync(both)()["sum"] == 6
    assert list(Instance.objects.values_list("instance_id", flat=True)) == ["async"]
