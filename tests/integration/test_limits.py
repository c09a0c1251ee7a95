"""Concurrency and rate limits per workflow, in-process: the claim, the hand-on, the sweeper, deferral.

``slotted`` runs at most 2 instances at once; ``rate-limited`` starts at most 3 in any minute
(tests/testapp/workflows.py). A lease taken with ``leases.take`` under another owner stands for a
replay running on another worker.
"""

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_workflows import workflows
from django_workflows.surfaces.checks import check_workflows
from django_workflows.shared.definition import WorkflowEntrypoint, registry
from django_workflows.reading.describe import describe_workflow
from django_workflows.models import Instance
from django_workflows.engine.replay import replay
from django_workflows.store import leases
from django_workflows.store.dispatch import sweep

ELSEWHERE = "another-host:1:1:1"


def _row(handle) -> Instance:
    return Instance.objects.get(pk=handle.pk)


def _hold(env, handle, seconds=60):
    """Take the instance's lease as a worker elsewhere would, holding one of its workflow's slots."""
    claim = leases.take(handle.pk, ELSEWHERE, env.now, seconds)
    assert claim is not None
    return claim


def _create(n, **params):
    return [workflows.get("slotted").create(params={"n": i, **params}) for i in range(n)]


def test_claims_stop_at_the_limit_and_leave_the_rest_queued(workflows_env):
    a, b, c, d = _create(4)
    workflows_env.executor.reset()
    _hold(workflows_env, a)
    _hold(workflows_env, b)
    before = {h.pk: _row(h).epoch for h in (c, d)}
    assert replay(c.pk) is False
    assert replay(d.pk) is False
    for handle in (c, d):
        row = _row(handle)
        assert (row.status, row.epoch, row.started_at, row.lease_owner) == ("queued", before[handle.pk], None, "")
    assert describe_workflow("slotted")["limits"] == {
        "concurrency": 2, "rate_limit": None, "running": 2, "queued": 2, "recent_starts": None,
    }


def test_the_api_and_the_admin_show_each_limit_and_where_the_workflow_stands(workflows_env, admin_client):
    a, b, c, d = _create(4)
    workflows_env.executor.reset()
    _hold(workflows_env, a)
    _hold(workflows_env, b)
    for handle in (c, d):
        replay(handle.pk)  # at the limit: left queued
    [workflows.get("rate-limited").create() for _ in range(4)]
    workflows_env.run_until_idle()  # three start, the fourth waits for the window

    slotted = admin_client.get("/workflows/slotted/").json()["limits"]
    assert slotted == {"concurrency": 2, "rate_limit": None, "running": 2, "queued": 2, "recent_starts": None}
    listed = {w["name"]: w["limits"] for w in admin_client.get("/workflows/").json()}
    assert listed["slotted"] == slotted
    assert listed["rate-limited"] == {"concurrency": None, "rate_limit": "3/minute", "running": 0, "queued": 0,
                                      "recent_starts": 3}
    assert listed["three-steps"] is None

    page = admin_client.get(reverse("admin:django_workflows_instance_workflow", args=["slotted"])).content.decode()
    assert ('Concurrency limit: <strong>2</strong> at once; <strong>2</strong> running, '
            '<strong>2</strong> queued.') in page
    page = admin_client.get(reverse("admin:django_workflows_instance_workflow",
                                    args=["rate-limited"])).content.decode()
    assert "Rate limit: <strong>3/minute</strong> starts; <strong>3</strong> in the current window." in page
    overview = admin_client.get(reverse("admin:django_workflows_instance_workflows")).content.decode()
    assert "concurrency 2: 2 running, 2 queued" in overview
    assert "rate 3/minute: 3 in the window" in overview

    out = io.StringIO()
    call_command("workflows", "describe", "slotted", stdout=out)
    assert re.search(r"^Concurrency limit:? +2 \(2 running, 2 queued\)$", out.getvalue(), re.M), out.getvalue()


def test_a_finishing_replay_hands_its_slot_to_the_oldest_queued_instance(workflows_env):
    a, b, c, d = _create(4)
    workflows_env.executor.reset()
    _hold(workflows_env, a)  # one slot taken elsewhere, one free
    # d, the newest, may not jump the queue: c is queued before it and the free slot is c's.
    assert replay(d.pk) is False
    assert replay(b.pk) is True
    assert b.status()["status"] == "complete"
    # b's replay gave its slot back and queued the oldest instance waiting for one: c, not d.
    assert list(workflows_env.executor.queue) == [c.pk]
    assert replay(d.pk) is False
    workflows_env.run_until_idle()
    assert [h.status()["status"] for h in (b, c, d)] == ["complete"] * 3
    assert _row(b).started_at <= _row(c).started_at <= _row(d).started_at
    assert _row(a).status == "running"


def test_queued_instances_start_in_order_of_creation(workflows_env):
    a, b, c, d, e, f = _create(6)
    workflows_env.executor.reset()
    _hold(workflows_env, a)
    _hold(workflows_env, b)
    # Both slots are free again (their worker ended them and died before handing them on).
    Instance.objects.filter(pk__in=[a.pk, b.pk]).update(status="complete", lease_owner="", lease_expires_at=None)
    # Deliveries arrive newest first: an instance starts only while fewer than 2 are running or queued
    # before it, so f (c, d, e before it) and e (c, d) wait, and d (only c before it) starts.
    assert replay(f.pk) is False
    assert replay(e.pk) is False
    assert replay(d.pk) is True
    # d's replay handed on both free slots, to the oldest instances waiting: c and e.
    assert list(workflows_env.executor.queue) == [c.pk, e.pk]
    workflows_env.run_until_idle()
    assert [h.status()["status"] for h in (c, d, e, f)] == ["complete"] * 4
    assert [_row(h).epoch for h in (c, d, e, f)] == [1] * 4  # each claimed once


def test_a_suspended_instance_holds_no_slot(workflows_env):
    sleepers = _create(3, sleep="1 hour")
    waiters = _create(2, wait=True)
    workflows_env.run_until_idle()
    # Five instances, two slots: each ran to its sleep or wait and gave its slot back.
    assert [_row(h).status for h in sleepers + waiters] == ["waiting"] * 5
    assert describe_workflow("slotted")["limits"]["running"] == 0
    for handle in waiters:
        handle.send_event(type="go", payload={})
    workflows_env.advance("2 hours")
    assert [h.status()["status"] for h in sleepers + waiters] == ["complete"] * 5


def test_an_expired_lease_frees_its_slot(workflows_env):
    a, b, c = _create(3)
    workflows_env.executor.reset()
    _hold(workflows_env, a, seconds=60)
    _hold(workflows_env, b, seconds=60)
    assert replay(c.pk) is False
    workflows_env.clock.advance(timedelta(seconds=61))
    # Their worker died: the leases expired and hold no slot, even before the sweeper sees them.
    assert describe_workflow("slotted")["limits"]["running"] == 0
    assert sweep() >= 2
    # The sweeper queued a and b again, and handed the free slots on to the oldest queued instances.
    assert {_row(a).status, _row(b).status} == {"queued"}
    workflows_env.run_until_idle()
    assert [h.status()["status"] for h in (a, b, c)] == ["complete"] * 3


def test_the_sweeper_hands_on_a_slot_whose_hand_on_was_lost(workflows_env):
    a, b, c = _create(3)
    workflows_env.executor.reset()
    _hold(workflows_env, a)
    _hold(workflows_env, b)
    assert replay(c.pk) is False
    # a ends on its worker, which dies before it hands its slot on.
    Instance.objects.filter(pk=a.pk).update(status="complete", lease_owner="", lease_expires_at=None)
    assert list(workflows_env.executor.queue) == []
    sweep()
    assert list(workflows_env.executor.queue) == [c.pk]
    assert replay(c.pk) is True
    assert c.status()["status"] == "complete"


def test_the_sweeper_does_not_redispatch_instances_waiting_for_a_slot(workflows_env, settings):
    a, b, c = _create(3)
    workflows_env.executor.reset()
    _hold(workflows_env, a, seconds=3600)
    _hold(workflows_env, b, seconds=3600)
    assert replay(c.pk) is False
    workflows_env.clock.advance(timedelta(minutes=5))  # past REDISPATCH_SECONDS
    assert sweep() == 0
    assert list(workflows_env.executor.queue) == []


def test_rate_limit_defers_starts_to_when_the_sliding_window_allows(workflows_env):
    t0 = workflows_env.now
    first = [workflows.get("rate-limited").create() for _ in range(5)]
    workflows_env.run_until_idle()
    rows = [_row(h) for h in first]
    started = [r for r in rows if r.started_at is not None]
    deferred = [r for r in rows if r.started_at is None]
    assert len(started) == 3 and len(deferred) == 2
    for row in deferred:
        assert (row.status, row.wake_at, row.epoch) == ("waiting", t0 + timedelta(minutes=1), 0)
        assert "rate limit 3/minute" in row.waiting_reason
    assert describe_workflow("rate-limited")["limits"]["recent_starts"] == 3
    workflows_env.advance("59 seconds")
    assert sum(_row(h).started_at is not None for h in first) == 3
    workflows_env.advance("1 second")  # t0 + 60 s: the three starts at t0 are out of the window
    assert all(_row(h).started_at is not None for h in first)
    assert all(_row(h).waiting_reason is None for h in first)
    # At t0 + 61 s the window (t0 + 1 s, t0 + 61 s] holds two starts: one more may start, the next waits
    # until the oldest of those three starts leaves it, at t0 + 120 s.
    workflows_env.advance("1 second")
    more = [workflows.get("rate-limited").create() for _ in range(2)]
    workflows_env.run_until_idle()
    assert sorted(_row(h).started_at is not None for h in more) == [False, True]
    [late] = [_row(h) for h in more if _row(h).started_at is None]
    assert late.wake_at == t0 + timedelta(minutes=2)
    workflows_env.advance("1 hour")
    assert all(h.status()["status"] == "complete" for h in first + more)


def test_a_workflow_without_limits_claims_in_one_statement_while_others_have_limits(workflows_env):
    instance = workflows.get("three-steps").create()
    workflows_env.executor.reset()
    with CaptureQueriesContext(connection) as ctx:
        replay(instance.pk)
    assert len(ctx.captured_queries) == 5, [q["sql"] for q in ctx.captured_queries]


def test_an_idle_sweep_asks_the_same_whatever_the_number_of_limited_workflows(workflows_env):
    def idle_sweep() -> list[str]:
        with CaptureQueriesContext(connection) as ctx:
            assert sweep() == 0
        return _engine_statements(ctx)

    before = idle_sweep()
    declared = [type(f"Limited{n}", (WorkflowEntrypoint,), {"name": f"limited-{n}", "concurrency": 3,
                                                            "run": lambda self, event, step: None})
                for n in range(20)]
    try:
        after = idle_sweep()
        # The test app declares limited workflows already: one statement asks which of them have queued
        # instances, and asks it of twenty more at no extra statement.
        assert len(after) == len(before), after
        assert sum("WHERE EXISTS" in sql for sql in after) == 1
        # A queued instance of one of them brings its own hand-on; the others still cost nothing.
        workflows.get("limited-7").create()
        with CaptureQueriesContext(connection) as ctx:
            sweep()
        assert len(_engine_statements(ctx)) == len(after) + 1
    finally:
        for cls in declared:
            registry.unregister(cls)


def _engine_statements(ctx):
    return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]


def test_statements_of_a_claim_within_limits(workflows_env):
    [slotted] = _create(1)
    rated = workflows.get("rate-limited").create()
    workflows_env.executor.reset()
    with CaptureQueriesContext(connection) as ctx:
        assert replay(slotted.pk)
    statements = _engine_statements(ctx)
    # the unlimited claim (which leaves it out), read and lock, the claim within the limit, 2 steps,
    # finish, the hand-on's read; on PostgreSQL the last step's row and the finish are one statement
    assert len(statements) == (6 if connection.vendor == "postgresql" else 7), statements
    with CaptureQueriesContext(connection) as ctx:
        assert replay(rated.pk)
    statements = _engine_statements(ctx)
    # the unlimited claim, read and lock, the window's read, the claim, the sleep, the release
    assert len(statements) == 6, statements


@pytest.mark.parametrize(("attribute", "value", "check"), [
    ("concurrency", 0, "E026"), ("concurrency", "10", "E026"), ("concurrency", True, "E026"),
    ("rate_limit", "100/day", "E027"), ("rate_limit", "100", "E027"), ("rate_limit", 100, "E027"),
    ("rate_limit", "0/minute", "E027"),
])
def test_checks_refuse_bad_limits(attribute, value, check):
    cls = type("BadLimits", (WorkflowEntrypoint,), {attribute: value, "run": lambda self, e, s: None})
    try:
        [message] = check_workflows()
        assert message.id == f"django_workflows.{check}" and f"BadLimits.{attribute}" in message.msg
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize(("attribute", "value"), [
    ("concurrency", 1), ("concurrency", 500), ("rate_limit", "100/minute"), ("rate_limit", "5/second"),
    ("rate_limit", "10 / hour"), ("rate_limit", "3/min"),
])
def test_checks_accept_good_limits(attribute, value):
    cls = type("GoodLimits", (WorkflowEntrypoint,), {attribute: value, "run": lambda self, e, s: None})
    try:
        assert check_workflows() == []
    finally:
        registry.unregister(cls)
