"""Replays through real workflows_worker processes: timers, events, crashes, scale-out, poison."""

from __future__ import annotations

import os
import signal
import time
from statistics import median

import pytest
from django.db import connection

from django_workflows import workflows
from django_workflows.shared import processes
from django_workflows.models import Event, Instance, Step, WorkerHeartbeat
from tests.testapp.models import ReplayAudit, SideEffect
from tests.workers import assert_naps_resume_on_time, create_crashable, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

# CI's Django 6 pass runs the tests marked django_version: django-q2's cluster, its qcluster command and
# the worker's command on the running Django, forking processes that reopen its connections. The others
# here are the engine's own recovery (wedges, poison, leases), the same on either Django.


@pytest.mark.django_version
def test_a_sleep_resumes_within_a_second_and_a_half_of_its_wake_time(start_worker):
    start_worker()
    assert_naps_resume_on_time()


@pytest.mark.django_version
def test_an_event_resumes_a_waiting_instance(start_worker):
    start_worker()
    instances = [workflows.get("awaiter").create() for _ in range(5)]
    for instance in instances:
        wait_for(lambda i=instance: Instance.objects.get(pk=i.pk).waiting_for == ["go"], 20, message="waiting")
    latencies = []
    for n, instance in enumerate(instances):
        sent = time.time()
        instance.send_event(type="go", payload={"n": n})
        wait_status(instance, "complete", 10)
        output = instance.status()["output"]
        assert output["payload"] == {"n": n}
        latencies.append(output["at"] - sent)
    print(f"event to resume: median {median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms")


@pytest.mark.django_version
@pytest.mark.parametrize("broker", ["orm", pytest.param("redis", marks=pytest.mark.postgres)])
def test_sigkill_of_a_worker_process_mid_step(start_worker, tmp_path, broker, request):
    if broker == "redis":
        request.getfixturevalue("redis_broker")
    worker = start_worker(broker=broker)
    instance, pid = create_crashable(tmp_path, "crash-1", 30)
    assert pid != worker.pid
    os.kill(pid, signal.SIGKILL)
    wait_status(instance, "complete", 40)
    counts = SideEffect.counts()
    # Finished steps did not run again; the interrupted one did.
    assert counts == {"crash-1:before": 1, "crash-1:victim": 2, "crash-1:after": 1}
    assert Instance.objects.get(pk=instance.pk).crash_count == 0


@pytest.mark.parametrize("workflow", ["crashable-all", "crashable-gather"])
def test_sigkill_during_three_steps_side_by_side_runs_them_again_and_journals_each_once(start_worker, tmp_path,
                                                                                       workflow):
    worker = start_worker()
    marker = tmp_path / "victim.pid"
    instance = workflows.get(workflow).create(id="all-1", params={"marker": str(marker)})
    pid = int(wait_for(lambda: marker.exists() and marker.read_text(), 30, message="the victim step to start"))
    assert pid != worker.pid
    # The two others side by side have run (on a loaded machine, one may start after the victim hangs).
    wait_for(lambda: {"all-1:left", "all-1:right"} <= set(SideEffect.counts()), 30, message="the other two steps")
    os.kill(pid, signal.SIGKILL)
    wait_status(instance, "complete", 40)
    # None of the three was journaled when the process died, so all three ran again, once; the step
    # before them did not, and each has one journal row.
    assert SideEffect.counts() == {"all-1:before": 1, "all-1:left": 2, "all-1:victim": 2, "all-1:right": 2,
                                   "all-1:after": 1}
    assert instance.status()["output"] == [2, "survived", 2]
    keys = list(Step.objects.filter(instance_id=instance.pk).order_by("id").values_list("key", flat=True))
    assert keys == ["before-1", "left-1", "victim-1", "right-1", "after-1"]


@pytest.mark.parametrize("point", ["before", "during", "before commit", "after commit"])
def test_a_sigkill_at_any_point_of_an_atomic_step_leaves_one_write_and_one_journal_row(start_worker, tmp_path,
                                                                                       point):
    start_worker()
    marker = tmp_path / "killed.pid"
    iid = f"atomic-{point.replace(' ', '-')}"
    instance = workflows.get("killed-atomic").create(id=iid, params={"point": point, "marker": str(marker),
                                                                      "atomic": True})
    wait_status(instance, "complete", 60)
    assert marker.exists()  # the process did die there
    # Killed before its commit, the body's write went with its transaction; killed after, the journal row
    # committed with it, and the replay that followed took the step from the journal.
    assert SideEffect.counts() == {f"{iid}:body": 1, f"{iid}:after": 1}
    assert instance.status()["output"] == 1
    assert Step.objects.filter(instance_id=instance.pk, key="write-1").count() == 1


def test_without_atomic_a_sigkill_before_the_journal_row_commits_writes_twice(start_worker, tmp_path):
    start_worker()
    marker = tmp_path / "killed.pid"
    instance = workflows.get("killed-atomic").create(id="plain", params={"point": "before commit",
                                                                          "marker": str(marker), "atomic": False})
    wait_status(instance, "complete", 60)
    assert marker.exists()
    # The duplicate atomic=True prevents: the body's write had committed on its own, and ran again.
    assert SideEffect.counts() == {"plain:body": 2, "plain:after": 1}
    assert instance.status()["output"] == 2


@pytest.mark.django_version
def test_sigkill_of_the_whole_worker_command_then_a_restart_loses_nothing(start_worker, tmp_path):
    first = start_worker()
    marker = tmp_path / "victim.pid"
    crashing = workflows.get("crashable").create(id="crash-all", params={"marker": str(marker), "then_sleep": True})
    nappers = [workflows.get("napper").create(params={"duration": "3 seconds"}) for _ in range(5)]
    waiters = [workflows.get("awaiter").create() for _ in range(5)]
    wait_for(lambda: marker.exists() and marker.read_text(), 30, message="the victim step to start")
    for waiter in waiters:
        wait_for(lambda w=waiter: Instance.objects.get(pk=w.pk).waiting_for == ["go"], 20, message="waiting")
    first.kill_all()
    # With no worker at all, events still arrive and are kept.
    for waiter in waiters:
        waiter.send_event(type="go", payload="while down")
    start_worker()
    for instance in [crashing, *nappers, *waiters]:
        wait_status(instance, "complete", 60)
    counts = SideEffect.counts()
    assert counts == {"crash-all:before": 1, "crash-all:victim": 2, "crash-all:after": 1}
    assert all(w.status()["output"]["payload"] == "while down" for w in waiters)


@pytest.mark.postgres
def test_two_workers_on_one_postgresql_and_redis_never_overlap(start_worker, redis_broker):
    start_worker(broker="redis", name="machine-a")
    start_worker(broker="redis", name="machine-b")
    handle = workflows.get("quick")
    instances = []
    for chunk in range(2):
        instances += handle.create_batch([{"id": f"q-{chunk}-{n}"} for n in range(100)])
    # Duplicate deliveries on purpose: every instance's replay is enqueued a second time.
    from django_workflows.executors import get_executor

    for instance in instances[:50]:
        get_executor().enqueue_replay(instance.pk)
    wait_for(lambda: Instance.objects.filter(status="complete").count() == 200, 90, interval=0.5,
             message="200 instances to complete")
    counts = SideEffect.counts()
    assert len(counts) == 600 and set(counts.values()) == {1}
    assert Step.objects.count() == 600
    pids = set(ReplayAudit.objects.values_list("pid", flat=True))
    by_instance: dict[int, list] = {}
    for row in ReplayAudit.objects.order_by("instance_pk", "started").values("instance_pk", "started", "released"):
        by_instance.setdefault(row["instance_pk"], []).append(row)
    overlaps = 0
    for rows in by_instance.values():
        for before, after in zip(rows, rows[1:]):
            assert before["released"] is not None
            overlaps += after["started"] < before["released"]
    print(f"scale-out: {ReplayAudit.objects.count()} replays by {len(pids)} processes, {overlaps} overlaps")
    assert overlaps == 0
    assert len(pids) >= 2


def test_a_poison_instance_is_parked(start_worker):
    start_worker()
    instance = workflows.get("poison").create(id="poison-1")
    wait_status(instance, "errored", 60)
    error = instance.status()["error"]
    assert error["name"] == "PoisonInstance"
    assert "2 replays in a row" in error["message"]
    assert SideEffect.counts() == {"poison-1:poison": 2}


def test_the_worker_restarts_a_wedged_cluster(start_worker):
    # SQLite's own default wait for the write lock, as in a project's settings, not the suite's longer one:
    # the freeze may land while a cluster process holds the lock (claiming a task, answering a probe), and
    # each of the worker's writes then waits that long before it fails, as the next test shows.
    worker = start_worker(env={"TEST_SQLITE_TIMEOUT": "5"})
    wait_for(lambda: WorkerHeartbeat.objects.exists(), 20, message="a heartbeat")

    def cluster_processes():
        # The sentinel is the command's child with the workers, pusher and monitor under it.
        for child in processes.children_of(worker.pid):
            grandchildren = processes.children_of(child)
            if len(grandchildren) >= 3:
                return grandchildren
        return None

    cluster = wait_for(cluster_processes, 20, message="the cluster's processes")
    # Freeze every process of the cluster: it stays alive but takes no task.
    for pid in cluster:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: WorkerHeartbeat.objects.filter(cluster_restarts__gte=1).exists(), 40,
             message="the cluster to be restarted")
    instance = workflows.get("quick").create(id="after-wedge")
    wait_status(instance, "complete", 30)


def test_the_worker_restarts_a_cluster_wedged_inside_a_write_transaction(start_worker, tmp_path):
    """A cluster frozen while one of its replays is inside a write transaction: on SQLite, its
    process keeps the database's write lock, so every write of the worker's (its sweep, its
    heartbeat, the probe it sends the cluster) fails with "database is locked". The worker must
    still see the cluster is wedged and restart it, which ends the transaction and frees the lock."""
    # SQLite's own default wait for the lock, as in a project's settings, not the test suite's longer one.
    worker = start_worker(env={"TEST_SQLITE_TIMEOUT": "5"})
    marker = tmp_path / "holder.pid"
    holder = workflows.get("holds-the-lock").create(id="holder", params={"marker": str(marker)})
    pid = int(wait_for(lambda: marker.exists() and marker.read_text(), 30, message="the step to hold its lock"))
    sentinel = next(child for child in processes.children_of(worker.pid) if pid in processes.children_of(child))
    for process in [sentinel, *processes.children_of(sentinel)]:
        os.kill(process, signal.SIGSTOP)
    # Each of the worker's writes waits 5 s for the lock before it fails: the restart takes a few of them.
    wait_for(lambda: WorkerHeartbeat.objects.filter(cluster_restarts__gte=1).exists(), 120,
             message="the cluster to be restarted")
    # The held transaction was rolled back with its process, and the step ran again.
    wait_status(holder, "complete", 30)
    assert SideEffect.objects.get(name="holder:hold").count == 1
    wait_status(workflows.get("quick").create(id="after-the-lock"), "complete", 30)


def test_the_cluster_dies_with_its_sentinel_and_its_command(start_worker):
    worker = start_worker()

    def cluster():
        # The sentinel and the two workers, the monitor and the pusher under it (started last).
        for child in processes.children_of(worker.pid):
            grandchildren = processes.children_of(child)
            if len(grandchildren) >= 4:
                time.sleep(0.5)  # the sentinel is past its start-up
                return child, grandchildren
        return None

    def alive(pids) -> list[int]:
        found = []
        for pid in pids:
            try:
                if processes.stat_fields(pid)[processes.STATE] not in processes.EXITED:
                    found.append(pid)
            except OSError:
                pass
        return found

    try:
        sentinel, under_it = wait_for(cluster, 20, message="the cluster's processes")
        os.kill(sentinel, signal.SIGKILL)
        # Left running, they would go on taking replays beside the cluster started in their place.
        wait_for(lambda: not alive(under_it), 5, message="the dead sentinel's processes to die")
        sentinel, under_it = wait_for(lambda: (found := cluster()) and found[0] != sentinel and found, 20,
                                     message="the cluster to be started again")
        os.kill(worker.pid, signal.SIGKILL)
        wait_for(lambda: not alive([sentinel, *under_it]), 5, message="the dead command's cluster to die")
    finally:
        try:  # whatever outlived its parent is still in the command's process group
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_cluster_whose_sentinel_dies_while_starting_is_started_again(monkeypatch, settings):
    from django_workflows.surfaces import cluster
    from django_workflows.surfaces import worker as worker_module

    starts = []

    def start(self):
        starts.append(time.monotonic())
        if len(starts) == 1:  # what django-q2 raises when the sentinel dies before it is up
            raise RuntimeError("Q Cluster failed to start: sentinel exited with code -9")

    monkeypatch.setattr(cluster.ClusterProcess, "start", start)
    monkeypatch.setattr(cluster.ClusterProcess, "alive", property(lambda self: len(starts) > 1))
    monkeypatch.setattr(cluster.ClusterProcess, "stop", lambda self, wait=60.0: None)
    settings.DJANGO_WORKFLOWS = {"SWEEP_INTERVAL": 0.1, "WAKE_INTERVAL": 0.1}
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        worker_module.Worker(max_seconds=1.0).run()  # the command no longer dies of it
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    assert len(starts) == 2


@pytest.mark.django_version
def test_a_stop_asked_for_while_the_cluster_is_being_built_stops_the_worker_cleanly(monkeypatch, settings):
    """The operator's Ctrl-C (or a deploy's SIGTERM) reaching the worker just as django-q2's Cluster puts
    its own signal handlers in, before the worker's are back: the worker stops as asked, the cluster it
    started is stopped, and its heartbeat goes with it."""
    from django_q import cluster as q2_cluster

    from django_workflows.surfaces import worker as worker_module

    install = signal.signal
    sent = []

    def installing(signum, handler):
        previous = install(signum, handler)
        if signum == signal.SIGINT and isinstance(getattr(handler, "__self__", None), q2_cluster.Cluster):
            sent.append(signum)
            os.kill(os.getpid(), signal.SIGINT)  # handled at the next bytecode, by the handler now in
        return previous

    settings.DJANGO_WORKFLOWS = {"SWEEP_INTERVAL": 0.1, "WAKE_INTERVAL": 0.1}
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    worker = worker_module.Worker(workers=1, max_seconds=20.0)
    monkeypatch.setattr(signal, "signal", installing)
    try:
        worker.run()
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
        worker.cluster.kill()
    assert sent == [signal.SIGINT]
    assert worker.signals == 1  # the worker's handler took it
    assert time.monotonic() - worker.started < 15  # it stopped on the signal, not at max_seconds
    assert not worker.cluster.process.alive
    assert not WorkerHeartbeat.objects.filter(worker_id=worker.worker_id).exists()


@pytest.mark.django_version
def test_health_check_reads_the_heartbeat(start_worker):
    from django.core.management import call_command

    with pytest.raises(SystemExit):
        call_command("workflows_health")
    worker = start_worker()
    wait_for(lambda: WorkerHeartbeat.objects.exists(), 20, message="a heartbeat")
    call_command("workflows_health")  # exits 0: no SystemExit
    worker.stop()
    assert not WorkerHeartbeat.objects.exists()  # a clean stop removes its heartbeat


@pytest.mark.django_version
def test_sigterm_stops_the_worker_gracefully(start_worker):
    worker = start_worker()
    wait_for(lambda: WorkerHeartbeat.objects.exists(), 20, message="a heartbeat")
    assert worker.stop(timeout=60) == 0


@pytest.mark.django_version
def test_a_plain_qcluster_finishes_instances(start_worker):
    start_worker(command="qcluster")
    instance = workflows.get("quick").create(id="via-qcluster")
    wait_status(instance, "complete", 30)
    assert connection.vendor in ("sqlite", "postgresql")


def test_a_step_longer_than_the_lease_keeps_its_lease(start_worker):
    start_worker(workers=2)
    instance = workflows.get("long-step").create(id="long", params={"seconds": 7})
    wait_status(instance, "complete", 40)
    # LEASE_SECONDS is 3: without renewal the sweeper would have handed it to the other process.
    assert SideEffect.counts() == {"long:long": 1}
    assert ReplayAudit.objects.count() == 1


def test_a_long_retention_sweep_runs_beside_the_wake_up_loop(workflows_env, settings):
    import threading
    from datetime import timedelta

    from django.db import connections
    from django.db.backends.signals import connection_created

    from django_workflows.surfaces import worker as worker_module

    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 2, "SWEEP_INTERVAL": 0.1,
                                 "WAKE_INTERVAL": 0.1, "IDLE_RECHECK_SECONDS": 0.1}
    old = [workflows.get("three-steps").create().pk for _ in range(5)]
    workflows_env.run_until_idle()
    workflows_env.advance("31 days")
    sleepers = [workflows.get("sleeper").create(params={"duration": "1 hour"}).pk for _ in range(3)]
    workflows_env.run_until_idle()
    worker = worker_module.Worker(run_cluster=False, max_seconds=120)
    held, release = threading.Event(), threading.Event()
    choosers: list[str] = []
    seen: dict = {}

    def hold_the_purge(execute, sql, params, many, context):
        # The purge's read of a batch waits until the test has seen what the worker did meanwhile:
        # a purge as long as the test needs, with no lock held (no transaction is open yet).
        if sql.startswith("SELECT") and '"ended_at" <' in sql and "LIMIT" in sql and "FOR UPDATE" not in sql:
            choosers.append(threading.current_thread().name)
            held.set()
            release.wait(60)
        return execute(sql, params, many, context)

    def hold_in_other_threads(sender, connection, **kwargs):
        # This thread's connection gets the wrapper below; every connection opened in another thread
        # (the purge's, wherever it runs) gets it here.
        if threading.current_thread() is not threading.main_thread() and \
                hold_the_purge not in connection.execute_wrappers:
            connection.execute_wrappers.append(hold_the_purge)

    def drive():
        try:
            if not held.wait(30):
                return
            workflows_env.clock.advance(timedelta(hours=2))  # the sleepers fall due
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                seen["woken"] = Instance.objects.filter(pk__in=sleepers, status="queued").count()
                seen["counted"] = WorkerHeartbeat.objects.filter(worker_id=worker.worker_id).values_list(
                    "wakeups", flat=True).first()
                if seen["woken"] == 3 and seen["counted"] == 3:
                    break
                time.sleep(0.05)
            seen["old"] = Instance.objects.filter(pk__in=old).count()
        finally:
            release.set()
            wait_for(lambda: not Instance.objects.filter(pk__in=old).exists(), 30,
                     message="the purge to finish")
            worker.stop_event.set()
            connections.close_all()

    connection_created.connect(hold_in_other_threads)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    driver = threading.Thread(target=drive, name="driver")
    driver.start()
    try:
        with connection.execute_wrapper(hold_the_purge):
            worker.run()
    finally:
        release.set()
        worker.stop_event.set()
        driver.join()
        connection_created.disconnect(hold_in_other_threads)
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    # While the purge was held, with nothing deleted yet, the wake-up loop woke the due instances and
    # its heartbeat counted them: the purge ran in a thread of its own, not in the loop.
    assert seen == {"woken": 3, "counted": 3, "old": 5}
    assert choosers and threading.main_thread().name not in choosers, choosers
    assert not Instance.objects.filter(pk__in=old).exists()


def test_a_child_sigkilled_mid_step_still_delivers_its_result_to_its_parent(start_worker, tmp_path):
    worker = start_worker()
    parent, pid = create_crashable(tmp_path, "parent-1", 30, workflow="kid-parent")
    assert pid != worker.pid
    os.kill(pid, signal.SIGKILL)
    wait_status(parent, "complete", 60)
    assert parent.status()["output"] == {"got": "survived"}
    child = Instance.objects.get(parent_id=parent.pk)
    assert child.status == "complete" and child.workflow_name == "crashable-kid"
    # The child's step ran again after the kill; the parent took the child's end from its inbox, once.
    assert SideEffect.counts() == {f"{child.instance_id}:victim": 2}
    (end,) = Event.objects.filter(instance_id=parent.pk)
    assert end.consumed_by.key == "kid-1 (result)-1"
