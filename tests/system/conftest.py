"""Fixtures of the system tier: real worker processes and the Redis broker."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.workers import WorkerProcess


@pytest.fixture
def start_worker(tmp_path, request):
    started: list[WorkerProcess] = []

    def start(**kwargs) -> WorkerProcess:
        kwargs.setdefault("name", f"worker-{len(started)}")
        worker = WorkerProcess(tmp_path, **kwargs).start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        for worker in started:
            print(f"--- {worker.log_path.name}\n{worker.output()}")


@pytest.fixture
def start_on(settings, start_worker):
    """``start_on(executor, replaying_args)``: a ``start(command, **kwargs)`` that starts
    ``workflows_worker --no-cluster`` (``start("workflows_worker")``) or a process of the executor's own that
    runs the replays (any other command: ``db_worker``, ``celery``), with ``replaying_args(name)`` as its
    arguments; each on the ``executor`` settings (``DJANGO_WORKFLOWS``), as this process is from then on."""

    def on(executor: dict, replaying_args: Callable[[str], list[str]]) -> Callable[..., WorkerProcess]:
        settings.DJANGO_WORKFLOWS = executor

        def start(command: str, **kwargs) -> WorkerProcess:
            extra_args = (["--no-cluster"] if command == "workflows_worker"
                          else replaying_args(kwargs.get("name", command)))
            return start_worker(command=command, settings=executor, extra_args=extra_args, **kwargs)

        return start

    return on


@pytest.fixture
def redis_broker(settings, monkeypatch):
    """Switch this process's django-q2 to the Redis broker (the workers get TEST_BROKER=redis)."""
    import redis
    from django_q.conf import Conf

    db = int(os.environ.get("TEST_REDIS_DB", "5"))
    redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()
    redis_conf = {"host": "127.0.0.1", "port": 6379, "db": db}
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "BROKER_CLASS", None)
    monkeypatch.setattr(Conf, "REDIS", redis_conf)
    settings.Q_CLUSTER = {**{k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")},
                          "redis": redis_conf}
    return "redis"
