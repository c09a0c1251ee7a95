"""atomic=True: the body's writes and its journal row commit in one transaction of the workflow
database, so a failed attempt, a timeout or a lost lease leaves none of the body's writes behind, and a
step that writes only to that database runs exactly once. What cannot hold is refused."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connections

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.models import Step
from django_workflows.store.lease_keeper import keeper
from tests.testapp.models import SideEffect

# How each test's body behaves on each attempt: {"fail": attempts that raise, "hang": attempts that
# overrun the timeout, "lose lease": attempts during which the lease is lost}.
plan: dict = {}
threads: list = []


@pytest.fixture(autouse=True)
def _reset():
    plan.clear()
    threads.clear()


def write_then(name, ctx):
    """Write a row, then do what the plan says for this attempt."""
    threads.append(threading.current_thread().name)
    SideEffect.bump(name)
    if ctx.attempt in plan.get("fail", ()):
        raise ValueError(f"attempt {ctx.attempt} failed after writing")
    if ctx.attempt in plan.get("hang", ()):
        time.sleep(3)
    if ctx.attempt in plan.get("lose lease", ()):
        for lease in keeper._held.values():
            lease.lost = True
    return SideEffect.objects.get(name=name).count


class Atomic(WorkflowEntrypoint):
    name = "atomic-step"

    def run(self, event, step):
        atomic = event["payload"]["atomic"]
        return step.do("write", lambda ctx: write_then("written", ctx), atomic=atomic,
                       config={"retries": {"limit": 2, "delay": 0}, "timeout": "1 second"})


def written():
    return SideEffect.counts().get("written", 0)


@pytest.mark.parametrize("atomic, rows", [(True, 1), (False, 3)])
def test_a_failed_attempt_leaves_none_of_its_writes_when_atomic(workflows_env, atomic, rows):
    plan["fail"] = {1, 2}
    instance = workflows.get("atomic-step").create(params={"atomic": atomic})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == rows
    assert written() == rows
    step = Step.objects.get(instance_id=instance.pk)
    assert [attempt["success"] for attempt in step.attempts] == [False, False, True]
    assert step.config.get("atomic", False) is atomic


def test_an_attempt_past_its_timeout_is_rolled_back(workflows_env):
    plan["hang"] = {1}
    instance = workflows.get("atomic-step").create(params={"atomic": True})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == 1
    assert written() == 1
    attempts = Step.objects.get(instance_id=instance.pk).attempts
    assert attempts[0]["error"]["name"] == "StepTimeoutError" and attempts[1]["success"]


@pytest.mark.parametrize("atomic, rows", [(True, 0), (False, 1)])
def test_a_lease_lost_during_the_body_rolls_its_writes_back(workflows_env, atomic, rows):
    plan["lose lease"] = {1}
    instance = workflows.get("atomic-step").create(params={"atomic": atomic})
    workflows_env.run_until_idle()
    # The replay was fenced: nothing was journaled, and the atomic body's write went with it.
    assert not Step.objects.filter(instance_id=instance.pk).exists()
    assert written() == rows


class AtomicSideBySide(WorkflowEntrypoint):
    name = "atomic-side-by-side"

    def run(self, event, step):
        return step.all([("plain", lambda: threading.current_thread().name),
                         ("atomic", lambda: threading.current_thread().name, {"atomic": True}),
                         ("other", lambda: threading.current_thread().name)])


def test_side_by_side_an_atomic_step_runs_in_the_replays_thread(workflows_env):
    instance = workflows.get("atomic-side-by-side").create()
    workflows_env.run_until_idle()
    plain, atomic, other = instance.status()["output"]
    assert plain.startswith("django-workflows-step") and other.startswith("django-workflows-step")
    assert atomic == threading.current_thread().name


class AtomicDecorated(WorkflowEntrypoint):
    name = "atomic-decorated"

    def run(self, event, step):
        @step.do("write", atomic=True, config={"retries": {"limit": 1, "delay": 0}})
        def write(ctx):
            return write_then("decorated", ctx)

        return write()


def test_the_decorator_form_takes_atomic(workflows_env):
    plan["fail"] = {1}
    instance = workflows.get("atomic-decorated").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == 1
    assert SideEffect.counts() == {"decorated": 1}


class AtomicAsyncBody(WorkflowEntrypoint):
    name = "atomic-async-body"

    def run(self, event, step):
        async def body():
            await asyncio.sleep(0)
            return 1

        return step.do("write", body, atomic=True)


def test_an_async_body_is_refused(workflows_env):
    instance = workflows.get("atomic-async-body").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "WorkflowConfigError" and "async def body" in error["message"]
    assert not Step.objects.filter(instance_id=instance.pk).exists()


class AtomicOtherDatabase(WorkflowEntrypoint):
    name = "atomic-other-database"

    def run(self, event, step):
        def body():
            SideEffect.bump("before the other database")
            with connections["other"].cursor() as cursor:
                cursor.execute("SELECT 1")
            return 1

        return step.do("write", body, atomic=True)


@pytest.fixture
def other_database(workflows_env):
    """A second database alias, as a project whose own models live apart from the workflows' has
    (added once the test's databases are set up, which would refuse it)."""
    connections.settings["other"] = connections.configure_settings(
        {"default": connections.settings["default"], "other": {"ENGINE": "django.db.backends.sqlite3",
                                                                "NAME": ":memory:"}})["other"]
    other = connections["other"]
    # The test case refuses connections to a database it was not told of; this one is the point.
    for name in ("connect", "temporary_connection", "cursor", "chunked_cursor"):
        other.__dict__.pop(name, None)
    other.connect()
    try:
        yield
    finally:
        connections["other"].close()
        del connections["other"]
        del connections.settings["other"]


def test_a_body_that_queries_another_database_errors_the_instance_and_writes_nothing(workflows_env,
                                                                                      other_database):
    instance = workflows.get("atomic-other-database").create()
    workflows_env.run_until_idle()
    error = instance.status()["error"]
    assert error["name"] == "WorkflowConfigError"
    assert "queried database 'other'" in error["message"] and "drop atomic=True" in error["message"]
    assert SideEffect.counts() == {}


def test_atomic_must_be_a_boolean(workflows_env):
    class Wrong(WorkflowEntrypoint):
        name = "atomic-wrong"

        def run(self, event, step):
            return step.do("write", lambda: 1, config={"atomic": "yes"})

    instance = workflows.get("atomic-wrong").create()
    workflows_env.run_until_idle()
    assert "atomic must be True or False, got 'yes'" in instance.status()["error"]["message"]


class Loop(WorkflowEntrypoint):
    name = "atomic-loop"

    def run(self, event, step):
        return sum(step.do("s", lambda: 1, atomic=event["payload"]["atomic"]) for _ in range(event["payload"]["n"]))


def test_an_atomic_step_writes_its_journal_row_in_one_statement_as_a_plain_step_does(workflows_env):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_workflows.engine.replay import replay

    counted = {}
    for atomic in (False, True):
        instance = workflows.get("atomic-loop").create(params={"n": 5, "atomic": atomic})
        workflows_env.executor.reset()
        with CaptureQueriesContext(connection) as ctx:
            replay(instance.pk)
        assert instance.status()["output"] == 5
        # The transaction's own BEGIN and COMMIT are the driver's, not statements; savepoints appear
        # when the test itself holds a transaction.
        counted[atomic] = [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(counted[True]) == len(counted[False]) == 7, counted[True]


def bump_from_a_thread(name: str) -> threading.Thread:
    """Write a row as a body's helper thread would: on the thread's own connection."""

    def write():
        try:
            SideEffect.bump(name)
        finally:
            connections.close_all()

    thread = threading.Thread(target=write, name="body's helper")
    thread.start()
    threads.append(thread)
    # On PostgreSQL the write commits at once. On SQLite it waits for the step's transaction, which holds
    # the database's one write lock: the body goes on without it, and it lands once the attempt ended.
    thread.join(timeout=0.5)
    return thread


class AtomicWithAThread(WorkflowEntrypoint):
    name = "atomic-with-a-thread"

    def run(self, event, step):
        def body(ctx):
            SideEffect.bump("body")
            bump_from_a_thread("thread")
            if ctx.attempt == 1:
                raise ValueError("the first attempt fails after both writes")
            return ctx.attempt

        return step.do("write", body, atomic=True, config={"retries": {"limit": 1, "delay": 0}})


def test_writes_from_another_thread_are_outside_the_step_and_are_reported(transactional_db, caplog):
    from django_workflows.testing import run_workflows

    with run_workflows() as env:
        instance = workflows.get("atomic-with-a-thread").create()
        with caplog.at_level("WARNING", logger="django_workflows.engine.step"):
            env.run_until_idle()
    for thread in threads:
        thread.join()
    assert instance.status()["output"] == 2
    # The body's own write was rolled back with the failed attempt; the thread's was not, on either
    # database: it is made once per attempt.
    assert SideEffect.counts() == {"body": 1, "thread": 2}
    reported = [record for record in caplog.records if "another thread wrote" in record.getMessage()]
    assert [record.attempt for record in reported] == [1, 2]
    message = reported[0].getMessage()
    assert "step 'write-1' is atomic=True" in message and "\"body's helper\"" in message
    assert "database 'default'" in message and "not part of the step's transaction" in message
    assert reported[0].step == "write-1" and reported[0].instance_pk == instance.pk


def test_another_replays_writes_are_not_reported(transactional_db, caplog):
    from django_workflows.testing import run_workflows

    # A thread that holds a lease runs a replay of its own: its statements are not the atomic body's.
    def other_replay():
        try:
            with keeper.hold(0, 0):
                SideEffect.bump("other replay")
        finally:
            connections.close_all()

    class AtomicBesideAReplay(WorkflowEntrypoint):
        name = "atomic-beside-a-replay"

        def run(self, event, step):
            def body():
                thread = threading.Thread(target=other_replay)
                thread.start()
                threads.append(thread)
                # On SQLite the other replay's write waits for this step's transaction (noted before it
                # waits, as any write is): the body goes on without it.
                thread.join(timeout=0.5)
                return 1

            return step.do("write", body, atomic=True)

    with run_workflows() as env:
        instance = workflows.get("atomic-beside-a-replay").create()
        with caplog.at_level("WARNING", logger="django_workflows.engine.step"):
            env.run_until_idle()
    for thread in threads:
        thread.join()
    assert instance.status()["output"] == 1
    assert SideEffect.counts() == {"other replay": 1}
    assert not [record for record in caplog.records if "another thread wrote" in record.getMessage()]
