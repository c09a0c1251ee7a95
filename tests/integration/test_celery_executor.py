"""The Celery executor: a replay is one Celery task carrying only the instance's primary key, sent through
the project's Celery app once the transaction that made the instance runnable commits. Here the app's
broker is kombu's in-process transport, and the tests take the messages off the queue and run the task
the worker would run (tests/system/test_celery_executor.py runs a real ``celery worker`` on Redis and on
RabbitMQ)."""

from __future__ import annotations

import logging
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from django_workflows import workflows
from django_workflows.errors import MissingExtra, WorkflowConfigError
from django_workflows.executors import get_executor
from django_workflows.executors.celery import REPLAY_TASK_NAME, CeleryExecutor
from django_workflows.models import Instance
from tests.celery_app import memory_app
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "workflows"


def use_celery_executor(settings, **options) -> None:
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.celery.CeleryExecutor",
                                 "EXECUTOR_OPTIONS": {"app": "tests.celery_app.memory_app", "queue": QUEUE,
                                                      **options}}


@pytest.fixture(autouse=True)
def empty_queue():
    # The in-process broker's queues live as long as the process: each test starts with its own empty.
    with memory_app.connection_for_write() as connection:
        connection.SimpleQueue(QUEUE).clear()


def take_messages(queue: str = QUEUE) -> list:
    """Every message waiting on ``queue``, taken off it (acknowledged), as (task name, args, kwargs,
    routing key)."""
    taken = []
    with memory_app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        while simple.qsize():
            message = simple.get(timeout=1)
            args, kwargs, _ = message.payload
            taken.append((message.headers["task"], args, kwargs, message.delivery_info["routing_key"]))
            message.ack()
    return taken


def run_worker(queue: str = QUEUE) -> int:
    """What a worker does with the queue's messages: run each one's registered task, until none are left
    (a replay may send more). Returns how many ran."""
    ran = 0
    while messages := take_messages(queue):
        for name, args, kwargs, _ in messages:
            memory_app.tasks[name](*args, **kwargs)
            ran += 1
    return ran


def test_a_replay_is_one_task_that_carries_only_the_instance_pk(settings):
    use_celery_executor(settings)
    instance = workflows.get("quick").create(id="one-task", params={"note": "not in the task"})
    assert take_messages() == [(REPLAY_TASK_NAME, [instance.pk], {}, QUEUE)]


def test_a_workflow_queue_s_replays_go_to_the_celery_queue_of_its_name(settings):
    # The test project has a second queue ("heavy"): each replay goes to the Celery queue its instance's
    # queue names, which the Celery workers started for it consume; the default queue's to the option's.
    use_celery_executor(settings)
    with memory_app.connection_for_write() as connection:
        connection.SimpleQueue("heavy").clear()
    heavy = workflows.get("quick").create(id="heavy-one", queue="heavy")
    light = workflows.get("quick").create(id="light-one")
    assert take_messages("heavy") == [(REPLAY_TASK_NAME, [heavy.pk], {}, "heavy")]
    assert take_messages() == [(REPLAY_TASK_NAME, [light.pk], {}, QUEUE)]


def test_the_replay_task_is_acknowledged_late_and_keeps_no_result(settings):
    use_celery_executor(settings)
    get_executor()
    task = memory_app.tasks[REPLAY_TASK_NAME]
    # acks_late: a worker killed mid-replay leaves the message to be delivered again; a pool process
    # lost mid-replay is left to the sweeper, not put back at once (executors/celery_task.py says why).
    assert (task.acks_late, task.reject_on_worker_lost, task.ignore_result) == (True, False, True)


def test_the_task_is_sent_only_once_the_transaction_commits(settings):
    use_celery_executor(settings)
    assert not get_executor().enqueues_in_transaction
    with pytest.raises(RuntimeError), transaction.atomic():
        workflows.get("quick").create(id="rolled-back")
        raise RuntimeError("roll back")
    assert take_messages() == []
    with transaction.atomic():
        instance = workflows.get("quick").create(id="committed")
        assert take_messages() == []
    assert [args for _, args, _, _ in take_messages()] == [[instance.pk]]


def test_without_a_queue_the_apps_own_routing_decides(settings):
    use_celery_executor(settings, queue=None)
    instance = workflows.get("quick").create(id="default-queue")
    assert take_messages(QUEUE) == []
    assert take_messages(memory_app.conf.task_default_queue) == [(REPLAY_TASK_NAME, [instance.pk], {}, "celery")]


def test_the_worker_runs_the_replays(settings):
    use_celery_executor(settings)
    instances = [workflows.get("quick").create(id=f"run-{n}") for n in range(3)]
    assert run_worker() == 3
    assert [instance.status()["status"] for instance in instances] == ["complete"] * 3
    assert SideEffect.counts() == {f"run-{n}:{step}": 1 for n in range(3) for step in ("one", "two", "three")}


def test_a_task_delivered_twice_runs_the_replay_once(settings):
    use_celery_executor(settings)
    instance = workflows.get("quick").create(id="twice")
    get_executor().enqueue_replay(instance.pk)
    assert run_worker() == 2
    # Both tasks ran; the second found the instance finished and did nothing.
    assert instance.status()["status"] == "complete"
    assert SideEffect.counts() == {"twice:one": 1, "twice:two": 1, "twice:three": 1}


def test_many_replays_are_sent_as_one_task_each(settings):
    use_celery_executor(settings)
    instances = [workflows.get("quick").create(id=f"many-{n}") for n in range(4)]
    take_messages()
    get_executor().enqueue_replays([instance.pk for instance in instances])
    assert [args for _, args, _, _ in take_messages()] == [[instance.pk] for instance in instances]


def test_an_event_sends_the_replay_that_resumes_the_instance(settings):
    use_celery_executor(settings)
    instance = workflows.get("awaiter").create(id="waits")
    run_worker()
    assert Instance.objects.get(pk=instance.pk).waiting_for == ["go"]
    instance.send_event(type="go", payload={"n": 1})
    assert run_worker() == 1
    assert instance.status()["output"]["payload"] == {"n": 1}


def test_a_broker_that_cannot_be_reached_leaves_the_instance_queued_for_the_sweeper(settings, caplog):
    use_celery_executor(settings, app="tests.celery_app.unreachable_app")
    with caplog.at_level(logging.WARNING, logger="django_workflows.executors"):
        instance = workflows.get("quick").create(id="no-broker")
    # The creation stands (the caller gets no error for the broker's trouble); the sweeper sends the
    # replay of an instance left queued again.
    assert instance.status()["status"] == "queued"
    assert f"could not enqueue a replay of instance {instance.pk}" in caplog.text
    assert "the sweeper will queue it again" in caplog.text


def test_workflows_worker_starts_no_django_q2_cluster_for_the_celery_executor(settings):
    use_celery_executor(settings)
    with pytest.raises(CommandError, match=r"celery -A <your app> worker.*--no-cluster"):
        call_command("workflows_worker", "--max-seconds", "0")


@pytest.mark.parametrize(("options", "problem"), [
    ({}, r"needs EXECUTOR_OPTIONS\['app'\].*got None"),
    ({"app": "tests.no_such_module.app"}, r"cannot import the Celery app 'tests.no_such_module.app'"),
    ({"app": "tests.celery_app.make_app"}, r"is a function, not a Celery app"),
    ({"app": "tests.celery_app.memory_app", "queue": ""}, r"must be the name of a Celery queue.*got ''"),
    ({"app": "tests.celery_app.memory_app", "queue_name": "workflows"}, r"remove 'queue_name'"),
])
def test_options_that_cannot_work_are_refused_before_an_instance_is_written(settings, options, problem):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.celery.CeleryExecutor",
                                 "EXECUTOR_OPTIONS": options}
    with pytest.raises(WorkflowConfigError, match=problem):
        workflows.get("quick").create(id="refused")
    assert not Instance.objects.exists()


def test_without_celery_the_executor_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "celery", None)  # as if it were not installed
    with pytest.raises(MissingExtra, match=r"'celery'.*pip install 'django-durable-workflows\[celery\]'"):
        CeleryExecutor(app="tests.celery_app.memory_app")
