"""Replays on a django-q2 cluster: the production executor.

One replay is one django-q2 task whose only argument is the instance's
primary key; when many instances become runnable together (timers due at
once, a batch created), one task carries the keys of up to ``REPLAY_BATCH``
of them, whose replays it runs one after another, each as if alone
(``django_workflows.engine.replay_tasks.run_replays``). With the ORM broker on the workflow tables' own database, the
task row is written inside the transaction that made the instance runnable,
so it exists exactly when that change commits; with another broker (Redis) it
is pushed once the transaction commits. Either way a lost or duplicated task
is harmless: the sweeper re-enqueues instances whose task went missing, and
the lease turns duplicates into no-ops.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.checks import CheckMessage, Error, Warning
from django.db import router

from django_workflows.shared import routing
from django_workflows.errors import WorkflowConfigError, require_extra
from django_workflows.executors import q2_conf
from django_workflows.executors.base import PROBE_TASK, REPLAY_TASK, REPLAYS_TASK, BaseExecutor, by_queue, run_task
from django_workflows.executors.q2_conf import ORM_BROKER, q_cluster
from django_workflows.moved_modules import current

TASK_GROUP = "django_workflows"


def uses_orm_broker() -> bool:
    conf = q_cluster()
    return bool(conf.get("orm")) and not conf.get("redis") and not conf.get("django_redis")


def batches(instance_pks: list[int]) -> list[list[int]]:
    """The instances split into tasks: as few as ``REPLAY_BATCH`` allows, yet at least two per worker
    process of the cluster as configured here while there are instances enough, so that a few dozen due
    at once still spread over the workers instead of queueing behind each other in one task."""
    from django_q.conf import Conf

    from django_workflows.foundations.conf import workflow_settings

    count = len(instance_pks)
    fewest = -(-count // max(workflow_settings.REPLAY_BATCH, 1))
    tasks = max(fewest, min(count, 2 * max(int(Conf.WORKERS or 1), 1)))
    size, extra = divmod(count, tasks) if tasks else (0, 0)
    chunks, start = [], 0
    for n in range(tasks):
        end = start + size + (1 if n < extra else 0)
        chunks.append(instance_pks[start:end])
        start = end
    return chunks


class DjangoQExecutor(BaseExecutor):
    """Enqueues each replay as a django-q2 task for ``manage.py workflows_worker`` (or ``qcluster``)."""

    def __init__(self, **options):
        super().__init__(**options)
        # Refused here, before an instance is written that no task could ever be enqueued for.
        require_extra("django_q", "q2", "The django-q2 executor (DJANGO_WORKFLOWS['EXECUTOR'])")
        problem = q2_conf.missing_broker_package()
        if problem:
            raise WorkflowConfigError(problem)

    @property
    def enqueues_in_transaction(self) -> bool:  # type: ignore[override]
        from django_workflows.models import Instance

        return uses_orm_broker() and q_cluster()["orm"] == router.db_for_write(Instance)

    def enqueue_replay(self, instance_pk: int) -> None:
        from django_q.tasks import async_task

        [(queue, _)] = by_queue([instance_pk]).items()
        # save=False: a replay's outcome lives in the workflow tables, not in django-q2's results.
        async_task(REPLAY_TASK, instance_pk, task_name=f"replay-{instance_pk}", group=TASK_GROUP,
                   save=False, ack_failure=True, cluster=q2_conf.list_key(queue))

    def enqueue_replays(self, instance_pks: list[int]) -> None:
        from django_q.tasks import async_task

        if len(instance_pks) == 1:
            self.enqueue_replay(instance_pks[0])
            return
        for queue, pks in by_queue(instance_pks).items():
            cluster = q2_conf.list_key(queue)
            for chunk in batches(pks):
                if len(chunk) == 1:
                    async_task(REPLAY_TASK, chunk[0], task_name=f"replay-{chunk[0]}", group=TASK_GROUP,
                               save=False, ack_failure=True, cluster=cluster)
                else:
                    async_task(REPLAYS_TASK, chunk, task_name=f"replays-{chunk[0]}+{len(chunk) - 1}",
                               group=TASK_GROUP, save=False, ack_failure=True, cluster=cluster)

    def replay_processes(self) -> int:
        from django_q.conf import Conf

        return max(int(Conf.WORKERS or 1), 1)

    def enqueue_probe(self, worker_id: str) -> None:
        from django_q.tasks import async_task

        # On the list of the first queue the worker serves: its cluster takes from that one.
        served = routing.served()
        async_task(PROBE_TASK, worker_id, task_name=f"probe-{worker_id}", group=TASK_GROUP, save=False,
                   ack_failure=True, cluster=q2_conf.list_key(served[0] if served else routing.DEFAULT_QUEUE))

    def check(self) -> Iterable:
        from django_workflows.foundations.conf import workflow_settings
        from django_workflows.shared.durations import parse_duration

        conf = q_cluster()
        messages: list[CheckMessage] = []
        if not any(conf.get(broker) for broker in ("orm", "redis", "django_redis", "sqs", "iron_mq", "mongo")):
            messages.append(Warning(
                "Q_CLUSTER names no broker, so django-q2 falls back to Redis on localhost.",
                hint=f"Add 'orm': 'default' and 'broker_class': '{ORM_BROKER}' for the ORM broker on your "
                     "database, or 'redis': {...} for Redis; or remove Q_CLUSTER, and the recommended "
                     "settings with the ORM broker apply.",
                id="django_workflows.W101",
            ))
        if q2_conf.read_too_early:
            messages.append(Warning(
                "django_q is listed before django_workflows in INSTALLED_APPS: django-q2 read its settings "
                "before django_workflows gave it the default Q_CLUSTER, and warns about them on every "
                "command (the default is in effect all the same).",
                hint="List 'django_workflows' before 'django_q' in INSTALLED_APPS, or set Q_CLUSTER yourself.",
                id="django_workflows.W110",
            ))
        timeout, retry = conf.get("timeout"), conf.get("retry", 60)
        if timeout is not None and retry is not None and timeout >= retry:
            messages.append(Error(
                f"Q_CLUSTER timeout ({timeout}) is not below retry ({retry}): a replay still running when "
                "retry passes is delivered to a second worker.",
                hint="Keep timeout a little below retry, e.g. timeout 1800 and retry 1860.",
                id="django_workflows.E102",
            ))
        try:
            step_timeout = parse_duration(workflow_settings.DEFAULT_STEP_CONFIG["timeout"]).total_seconds()
        except Exception:
            step_timeout = None  # reported by E003
        if timeout is not None and step_timeout is not None and timeout <= step_timeout:
            messages.append(Warning(
                f"Q_CLUSTER timeout ({timeout} s) is not above the default step timeout ({step_timeout:g} s): "
                "django-q2 kills the worker before a step's own timeout fails the attempt, and the "
                "instance counts a crash.",
                hint="Raise Q_CLUSTER timeout above the longest step timeout, or lower DEFAULT_STEP_CONFIG's.",
                id="django_workflows.W103",
            ))
        lease = workflow_settings.LEASE_SECONDS
        if isinstance(lease, int) and retry and lease >= retry:
            messages.append(Warning(
                f"LEASE_SECONDS ({lease}) is not below Q_CLUSTER retry ({retry}): when a worker dies, "
                "django-q2 delivers its task again while the dead worker's lease still holds, so the "
                "delivery does nothing and the instance waits for the sweeper.",
                hint=f"Raise Q_CLUSTER retry above both LEASE_SECONDS and timeout (the recommended "
                     f"settings: timeout 900, retry 960), or lower LEASE_SECONDS below {retry}.",
                id="django_workflows.W104",
            ))
        if "queue_limit" in conf and (conf["queue_limit"] is None or conf["queue_limit"] <= 0):
            messages.append(Warning(
                "Q_CLUSTER queue_limit is unbounded: a worker prefetches without limit, and a dead worker "
                "takes every prefetched task with it.",
                hint="Leave queue_limit out (workers squared) or set a small number such as 4 per worker.",
                id="django_workflows.W105",
            ))
        if not conf.get("ack_failures", False):
            messages.append(Warning(
                "Q_CLUSTER ack_failures is not True: a task that fails stays in the queue and is delivered "
                "again every retry seconds, for ever unless max_attempts is set, taking workers away from "
                "replays.",
                hint="Set 'ack_failures': True. Replay tasks are acknowledged either way: the workflow tables "
                     "keep every failure, and the sweeper enqueues again what needs it.",
                id="django_workflows.W106",
            ))
        if conf.get("save_limit", 250) == 0:
            messages.append(Warning(
                "Q_CLUSTER save_limit is 0 (unlimited): django-q2's task table grows without end.",
                hint="Set save_limit to a bound, or -1 to keep no successful tasks.",
                id="django_workflows.W107",
            ))
        if uses_orm_broker() and current(str(conf.get("broker_class", ""))) != ORM_BROKER:
            messages.append(Warning(
                "Q_CLUSTER uses django-q2's own ORM broker: an idle worker queries the queue table every "
                f"{conf.get('poll', 0.2)} s (poll).",
                hint=f"Add 'broker_class': '{ORM_BROKER}', which sleeps until a task is enqueued (a NOTIFY "
                     "on PostgreSQL, the database's log file on SQLite).",
                id="django_workflows.W108",
            ))
        return messages


# Tasks queued before the upgrade that moved them to django_workflows.engine.replay_tasks name these.

def run_replay(instance_pk: int) -> None:
    run_task(REPLAY_TASK, instance_pk)


def answer_probe(worker_id: str) -> None:
    run_task(PROBE_TASK, worker_id)
