"""step.child: a parent starts a child workflow and durably waits for its end (its output, or its error
raised in the parent with its class); the end is sent in the transaction that ends the child, buffered
if the parent is not waiting yet; creation is idempotent across a crash; the parent's terminate,
terminate-with-rollback and restart reach its running children by their policy."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from django.db import DatabaseError, OperationalError, connection

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.engine.child_steps import ChildSteps
from django_workflows.shared.definition import registry
from django_workflows.errors import InstanceTerminated, InvalidEventType
from django_workflows.models import Event, Instance, Step
from django_workflows.engine.replay import replay
from django_workflows.signals import replay_finished, replay_started
from django_workflows.store import children as children_store
from django_workflows.store import steering
from django_workflows.store.dispatch import sweep
from django_workflows.foundations.validation import INSTANCE_ID_PATTERN
from tests.own_connections import dsn
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


# What the saga below refunded, by the error it caught: the engine's own failures must never be among them.
refunds: list[str] = []


class ShipOrRefund(WorkflowEntrypoint):
    """A saga: ships through a child workflow, refunds if shipping fails."""

    name = "ship-or-refund"

    def run(self, event, step):
        try:
            shipped = step.child("ship", "kid", event.payload)
        except Exception as exc:  # the compensation: for the child's failure, never the database's
            refunds.append(repr(exc))
            return {"refunded": True}
        return {"shipped": shipped}


class TerminatedBeforeItsChild(WorkflowEntrypoint):
    """Terminated through the public API after its replay took the lease and before step.child creates its
    child. From run() itself: in a step's body, the terminate would fence that step's journal row, and the
    replay would stop before reaching step.child."""

    name = "terminated-before-its-child"

    def run(self, event, step):
        workflows.get(self.name).get(event.instance_id).terminate()
        return step.child("ship", "kid", {"n": 1})


# Only this module's tests see them: the API's schema lists every registered workflow's declared events,
# and the schema test expects the test app's alone.
WORKFLOWS = (Kid, Parent, AsyncParent, ShipOrRefund, TerminatedBeforeItsChild)
for _workflow in WORKFLOWS:
    registry.unregister(_workflow)


@pytest.fixture(autouse=True)
def _registered():
    for workflow in WORKFLOWS:
        registry.register(workflow)
    refunds.clear()
    yield
    refunds.clear()
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

    def create_then_crash(*args):
        pk = real_create(*args)
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


# A database error at any statement step.child makes is the engine's: the replay is abandoned and tried
# again, and run() never sees it (docs/concepts/guarantees.md).

INSTANCE, STEP, EVENT = (f'"{model._meta.db_table}"' for model in (Instance, Step, Event))


@dataclass(frozen=True)
class Statement:
    """A statement of step.child in its parent's replays: which replay makes it (the first creates the child
    and waits; the second takes the child's end), how its SQL begins, what else is in its SQL or its
    parameters, and what another connection runs on PostgreSQL to hold a lock the statement must wait for
    (``{parent}``: the parent's pk)."""

    replay: int
    begins: str
    lock: str
    has: str = ""
    key: str | None = None  # a journal row's step key

    def matches(self, sql: str, params) -> bool:
        params = list(params or ())
        return sql.startswith(self.begins) and self.has in sql and (self.key is None or self.key in params)


# On PostgreSQL a plain read waits only for a lock on its whole table; an insert, for a SHARE lock on it;
# the journal's writes and the release, for the parent's row, which their fence reads FOR SHARE or they
# update; the mark of an event consumed, for the event's row.
WHOLE_TABLE = "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE"
PARENT_ROW = f"SELECT 1 FROM {INSTANCE} WHERE id = {{parent}} FOR UPDATE"
PARENT_EVENTS = f"SELECT 1 FROM {EVENT} WHERE instance_id = {{parent}} FOR UPDATE"

STATEMENTS = {
    "the child's insert": Statement(1, f"INSERT INTO {INSTANCE}", f"LOCK TABLE {INSTANCE} IN SHARE MODE"),
    "the check of the parent's epoch": Statement(1, f'SELECT {INSTANCE}."id"', PARENT_ROW,
                                                 has='"epoch" = %s'),
    "the create step's journal row": Statement(1, f"INSERT INTO {STEP}", PARENT_ROW, key="ship-1"),
    "the wait's look in the inbox": Statement(1, f'SELECT {EVENT}."id"', WHOLE_TABLE.format(EVENT)),
    "the read of the child's end": Statement(1, f'SELECT {INSTANCE}."status"', WHOLE_TABLE.format(INSTANCE),
                                             has='"output"'),
    "the wait's journal row": Statement(1, f"INSERT INTO {STEP}", PARENT_ROW, key="ship-1 (result)-1"),
    "the release to wait for the child": Statement(1, f"UPDATE {INSTANCE} SET lease_owner", PARENT_ROW,
                                                   has="waiting_for"),
    "the take of the child's end from the inbox": Statement(2, f'SELECT {EVENT}."id"',
                                                            WHOLE_TABLE.format(EVENT)),
    "the journal row of the end taken": Statement(2, f"UPDATE {STEP}", PARENT_ROW),
    "the mark of the end as consumed": Statement(2, f"UPDATE {EVENT}", PARENT_EVENTS),
}

LOCK_TIMEOUT = "lock timeout"
CONNECTION_CUT = "connection cut"
FAULTS = [LOCK_TIMEOUT, pytest.param(CONNECTION_CUT, marks=pytest.mark.postgres)]



@contextmanager
def _held_by_another_connection(lock_sql: str):
    holder = psycopg.connect(**dsn())
    try:
        # Never waits long for a lock of the replay's own connection, which waits for this one meanwhile.
        holder.execute("SET lock_timeout = '5s'")
        holder.execute(lock_sql)
        yield
    finally:
        holder.close()  # ends its transaction, and the lock with it


class Fault:
    """Fails the first statement of the parent's ``statement.replay``-th replay that is ``statement``, as
    the database does: on PostgreSQL for real (its connection terminated by another one, or a lock held
    by another connection for longer than its lock_timeout); on SQLite, whose reads never wait for a
    lock and whose connection cannot be cut, by raising what it raises when its busy timeout runs out."""

    def __init__(self, parent_pk: int, statement: Statement, kind: str):
        self.parent_pk, self.statement, self.kind = parent_pk, statement, kind
        self.replays = 0
        self.armed = self.struck = False

    def started(self, instance_pk, **kwargs):
        if instance_pk == self.parent_pk:
            self.replays += 1
            self.armed = self.replays == self.statement.replay

    def finished(self, **kwargs):
        self.armed = False

    def __call__(self, execute, sql, params, many, context):
        if not self.armed or self.struck or not self.statement.matches(sql, params):
            return execute(sql, params, many, context)
        self.struck = True
        wrapper = context["connection"]
        if wrapper.vendor == "sqlite":
            raise OperationalError("database is locked")
        if self.kind == CONNECTION_CUT:
            with psycopg.connect(**dsn(), autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s, 5000)", [wrapper.connection.info.backend_pid])
            return execute(sql, params, many, context)
        with _held_by_another_connection(self.statement.lock.format(parent=self.parent_pk)):
            wrapper.connection.execute("SET lock_timeout = '50ms'")
            return execute(sql, params, many, context)


@contextmanager
def failing(parent_pk: int, statement: Statement, kind: str):
    fault = Fault(parent_pk, statement, kind)
    replay_started.connect(fault.started, weak=False)
    replay_finished.connect(fault.finished, weak=False)
    try:
        with connection.execute_wrapper(fault):
            yield fault
    finally:
        replay_started.disconnect(fault.started)
        replay_finished.disconnect(fault.finished)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", FAULTS)
@pytest.mark.parametrize("statement", list(STATEMENTS))
def test_a_database_error_at_a_statement_of_step_child_never_reaches_run(workflows_env, statement, kind):
    saga = start({"n": 21, "wait": True}, workflow="ship-or-refund")
    with failing(saga.pk, STATEMENTS[statement], kind) as fault:
        workflows_env.run_until_idle()
        if STATEMENTS[statement].replay == 2:
            kid_handle().send_event("go")
            workflows_env.run_until_idle()
    assert fault.struck
    row = Instance.objects.get(pk=saga.pk)
    # Abandoned: not errored, not counted toward poison, its lease back, and replayed 2 seconds later.
    assert (row.status, row.error, row.crash_count, row.lease_owner) == ("waiting", None, 0, "")
    assert row.wake_at == workflows_env.now + timedelta(seconds=2)
    assert refunds == []
    workflows_env.advance("2 seconds")
    if only_kid().status == "waiting":
        kid_handle().send_event("go")
        workflows_env.run_until_idle()
    assert saga.status()["output"] == {"shipped": {"double": 42}}
    assert refunds == []
    # One child, created once, and its create step's one attempt succeeded: the error was no attempt's.
    assert kids().count() == 1
    assert len(Step.objects.get(instance_id=saga.pk, key="ship-1").attempts) == 1


# A parent's terminate and its child's creation: the child is inserted only while the parent holds its
# lease at the epoch of the replay that creates it, so it never outlives a terminate that raced it.

def test_a_parent_terminated_before_it_creates_its_child_leaves_no_child(workflows_env):
    parent = start(None, workflow="terminated-before-its-child")
    workflows_env.run_until_idle()
    assert parent.status()["status"] == "terminated"
    assert not kids().exists()
    assert not Step.objects.filter(instance_id=parent.pk).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("moment", ["the child's insert", "the check of the parent's epoch"])
def test_a_terminate_racing_the_childs_creation_leaves_no_child_running(workflows_env, moment):
    parent = start({"n": 1}, workflow="ship-or-refund")
    statement = STATEMENTS[moment]
    # After the insert, PostgreSQL's terminate commits at once; SQLite's waits, as the insert holds its one
    # write lock. After the check, the terminate waits on either, for the parent's row or that lock.
    commits_first = moment == "the child's insert" and connection.vendor == "postgresql"
    outcome = []

    def terminate():
        try:
            parent.terminate()
            outcome.append("terminated")
        except BaseException as exc:
            outcome.append(repr(exc))
        finally:
            connection.close()

    racer = threading.Thread(target=terminate)

    def terminate_meanwhile(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if racer.ident is None and statement.matches(sql, params):
            # The child's creation has run this statement and not committed: the terminate, from another
            # connection, commits now or waits for that commit (given time to reach the wait).
            racer.start()
            racer.join(timeout=30 if commits_first else 0.5)
        return result

    with connection.execute_wrapper(terminate_meanwhile):
        replay(parent.pk)
    if racer.ident is not None:
        racer.join(timeout=30)
    assert outcome == ["terminated"]
    workflows_env.run_until_idle()
    assert parent.status()["status"] == "terminated"
    # Never a child that runs to its end: a terminate that commits before the check leaves none (the child
    # is rolled back), one that waits for the creation's commit reaches the child.
    assert [kid.status for kid in kids()] == ([] if commits_first else ["terminated"])
    assert refunds == []
