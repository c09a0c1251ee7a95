"""The tasks executor: a replay is one task of Django's tasks framework carrying only the instance's
primary key, written with the change that made the instance runnable when django-tasks-db's backend
shares the workflow tables' database, enqueued on commit otherwise; run here by django-tasks-db's
worker loop in this process (tests/system/test_tasks_executor.py runs it as ``manage.py db_worker``)."""

from __future__ import annotations

import django
import pytest
from django.db import transaction
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult

from django_workflows import workflows
from django_workflows.errors import MissingExtra, WorkflowConfigError
from django_workflows.executors import get_executor
from django_workflows.executors.tasks import TasksExecutor, tasks_framework
from django_workflows.models import Instance
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

REPLAY_TASK_PATH = "django_workflows.executors.replay_task.run_replay"


def use_tasks_executor(settings, backend: str = "workflows", queue_name: str = "workflows") -> None:
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.tasks.TasksExecutor",
                                 "EXECUTOR_OPTIONS": {"backend": backend, "queue_name": queue_name}}


def run_db_worker() -> None:
    """django-tasks-db's worker loop, as ``manage.py db_worker --batch`` runs it: every task that is
    ready, then return."""
    Worker(queue_names=["workflows"], interval=0, batch=True, backend_name="workflows", startup_delay=False,
           max_tasks=None, worker_id="test-db-worker", excluded_queue_names=[]).run()


def test_the_executor_uses_the_framework_of_this_django():
    # django-tasks (the backport) is installed in the test environment on Django 6 too: its tasks
    # would not be the ones django-tasks-db's backend takes there.
    assert tasks_framework().__name__ == ("django.tasks" if django.VERSION >= (6, 0) else "django_tasks")


def test_a_replay_is_one_task_that_carries_only_the_instance_pk(settings):
    use_tasks_executor(settings)
    instance = workflows.get("quick").create(id="one-task", params={"note": "not in the task"})
    [task] = DBTaskResult.objects.all()
    assert task.task_path == REPLAY_TASK_PATH
    assert task.args_kwargs == {"args": [instance.pk], "kwargs": {}}
    assert (task.backend_name, task.queue_name, task.status) == ("workflows", "workflows", "READY")


def test_a_workflow_queue_s_replays_go_to_the_task_queue_of_its_name(settings):
    # The test project has a second queue ("heavy"): its replays go to the backend's queue of that name,
    # which a db_worker started for it takes from; the default queue's to the executor's queue_name.
    settings.TASKS = {**settings.TASKS, "workflows": {**settings.TASKS["workflows"], "QUEUES": ["workflows", "heavy"]}}
    use_tasks_executor(settings)
    heavy = workflows.get("quick").create(id="heavy-one", queue="heavy")
    light = workflows.get("quick").create(id="light-one")
    queues = dict(DBTaskResult.objects.values_list("args_kwargs__args__0", "queue_name"))
    assert queues == {heavy.pk: "heavy", light.pk: "workflows"}


def test_a_workflow_queue_the_task_backend_does_not_list_is_refused_and_creates_nothing(settings):
    use_tasks_executor(settings)
    with pytest.raises(WorkflowConfigError, match="List 'heavy' in its QUEUES"):
        workflows.get("quick").create(id="nowhere", queue="heavy")
    assert not Instance.objects.exists() and not DBTaskResult.objects.exists()


def test_the_task_is_written_in_the_transaction_that_queues_the_instance(settings):
    use_tasks_executor(settings)
    assert get_executor().enqueues_in_transaction
    with pytest.raises(RuntimeError), transaction.atomic():
        instance = workflows.get("quick").create(id="rolled-back")
        # Before the commit, in the same transaction: a crash between the two cannot lose the task.
        assert DBTaskResult.objects.get().args_kwargs["args"] == [instance.pk]
        raise RuntimeError("roll back")
    assert not Instance.objects.exists() and not DBTaskResult.objects.exists()


def test_another_backend_gets_the_task_once_the_transaction_commits(settings):
    settings.TASKS = {**settings.TASKS, "dummy": {
        "BACKEND": f"{tasks_framework().__name__}.backends.dummy.DummyBackend", "QUEUES": ["workflows"]}}
    use_tasks_executor(settings, backend="dummy")
    executor = get_executor()
    assert not executor.enqueues_in_transaction
    with pytest.raises(RuntimeError), transaction.atomic():
        workflows.get("quick").create(id="rolled-back")
        raise RuntimeError("roll back")
    assert executor.backend.results == []
    with transaction.atomic():
        instance = workflows.get("quick").create(id="committed")
        assert executor.backend.results == []
    [result] = executor.backend.results
    assert (result.args, result.kwargs, result.task.module_path) == ([instance.pk], {}, REPLAY_TASK_PATH)
    assert (result.backend, result.task.queue_name) == ("dummy", "workflows")


def test_the_database_worker_runs_the_replays(settings):
    use_tasks_executor(settings)
    instances = [workflows.get("quick").create(id=f"run-{n}") for n in range(3)]
    run_db_worker()
    assert [instance.status()["status"] for instance in instances] == ["complete"] * 3
    assert set(DBTaskResult.objects.values_list("status", flat=True)) == {"SUCCESSFUL"}
    assert SideEffect.counts() == {f"run-{n}:{step}": 1 for n in range(3) for step in ("one", "two", "three")}


def test_a_task_delivered_twice_runs_the_replay_once(settings):
    use_tasks_executor(settings)
    instance = workflows.get("quick").create(id="twice")
    get_executor().enqueue_replay(instance.pk)
    assert DBTaskResult.objects.count() == 2
    run_db_worker()
    assert instance.status()["status"] == "complete"
    # Both tasks ran; the second found the instance finished and did nothing.
    assert list(DBTaskResult.objects.values_list("status", flat=True)) == ["SUCCESSFUL"] * 2
    assert SideEffect.counts() == {"twice:one": 1, "twice:two": 1, "twice:three": 1}


def test_an_event_enqueues_the_replay_that_resumes_the_instance(settings):
    use_tasks_executor(settings)
    instance = workflows.get("awaiter").create(id="waits")
    run_db_worker()
    assert Instance.objects.get(pk=instance.pk).waiting_for == ["go"]
    instance.send_event(type="go", payload={"n": 1})
    assert DBTaskResult.objects.filter(status="READY").count() == 1
    run_db_worker()
    assert instance.status()["output"]["payload"] == {"n": 1}


def test_an_immediate_backend_runs_the_replay_as_the_transaction_commits(settings):
    use_tasks_executor(settings, backend="default", queue_name="default")
    with transaction.atomic():
        instance = workflows.get("quick").create(id="at-once")
        assert instance.status()["status"] == "queued"
    assert instance.status()["status"] == "complete"


def test_workflows_worker_starts_no_django_q2_cluster_for_the_tasks_executor(settings):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    use_tasks_executor(settings)
    with pytest.raises(CommandError, match="db_worker.*--no-cluster"):
        call_command("workflows_worker", "--max-seconds", "0")


@pytest.mark.parametrize(("options", "problem"), [
    ({"backend": "nowhere"}, "doesn't exist"),
    ({"backend": "workflows", "queue_name": "elsewhere"}, "not valid"),
])
def test_options_the_backend_cannot_take_are_refused_before_an_instance_is_written(settings, options,
                                                                                   problem):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.tasks.TasksExecutor",
                                 "EXECUTOR_OPTIONS": options}
    with pytest.raises(WorkflowConfigError, match=problem):
        workflows.get("quick").create(id="refused")
    assert not Instance.objects.exists()


@pytest.mark.backport
def test_without_the_backport_on_django_5_the_executor_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "django_tasks", None)  # as if it were not installed
    with pytest.raises(MissingExtra, match=r"'django_tasks'.*\[tasks\]"):
        TasksExecutor(backend="workflows", queue_name="workflows")
