"""The chaos test's workflow, and the log its worker processes keep outside the database.

Every step body run and every replay is appended, as one JSON line, to a file of its own process
under ``TEST_CHAOS_LOG_DIR``. A file is a side effect that no database restart rolls back or
refuses, and a line written before a SIGKILL is still there afterwards, so the test can count how
often each step body really ran and check that one instance's replays never overlapped.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid

from django_workflows import WorkflowEntrypoint

LOG_DIR_VARIABLE = "TEST_CHAOS_LOG_DIR"
EVENT_TYPE = "chaos-ping"
PLANNED_FAILURE = "planned failure"

_log_fd: tuple[int, int] | None = None  # (pid, fd): reopened after a fork


def log(*record) -> None:
    """Append one record to this process's log: one write() on an O_APPEND file."""
    global _log_fd
    directory = os.environ.get(LOG_DIR_VARIABLE)
    if not directory:
        return
    pid = os.getpid()
    if _log_fd is None or _log_fd[0] != pid:
        path = os.path.join(directory, f"log-{pid}.jsonl")
        _log_fd = (pid, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    os.write(_log_fd[1], (json.dumps(record) + "\n").encode())


def read_logs(directory) -> list[list]:
    """Every record of every process; a line cut short by a SIGKILL mid-write is skipped."""
    records = []
    for name in sorted(os.listdir(directory)):
        if not name.startswith("log-"):
            continue
        with open(os.path.join(directory, name)) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    return records


# A worker command run with its clock skewed (libfaketime) is told by how much: its records are kept in
# the host's time, so that the test can compare them with other processes' records and the journal's times.
SKEW_VARIABLE = "TEST_CHAOS_SKEW_SECONDS"


def real_time(moment: float) -> float:
    return moment - float(os.environ.get(SKEW_VARIABLE) or 0)


def name_connection(sender, connection, **kwargs):
    """Name each PostgreSQL connection after its process, so that the test's connection killer can say
    whose connection it cut."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('application_name', %s, false)", [f"chaos-{os.getpid()}"])


def side_effect(instance_id: str, key: str, body, busy_ms: int = 0):
    """Run a step body between two log records: ``run`` before it, ``ran`` once it returned or raised.
    The body takes ``busy_ms`` milliseconds, so that kills land inside step bodies too."""
    token = uuid.uuid4().hex[:12]
    log("run", instance_id, key, os.getpid(), real_time(time.time()), token)
    try:
        time.sleep(busy_ms / 1000)
        return body()
    finally:
        log("ran", instance_id, key, os.getpid(), real_time(time.time()), token)


# Replay audit and worker roles, connected by the test app when TEST_CHAOS_LOG_DIR is set.

def replay_started(sender, instance_pk, epoch, started, **kwargs):
    from django_workflows.shared import clock

    # How far this process's reading of the database's clock is from the host's clock. The database
    # server runs on this host, so the two are one clock: anything but a few milliseconds is an error
    # in the reading, and leases are taken and held on it.
    # Read between two readings of the host's clock; a process descheduled in between says nothing.
    before = time.time()
    database_time = clock.now().timestamp()
    after = time.time()
    clock_error = database_time - real_time((before + after) / 2) if after - before < 0.005 else None
    log("replay", instance_pk, epoch, os.getpid(), real_time(started), clock_error)


def replay_finished(sender, instance_pk, epoch, outcome, released, **kwargs):
    log("released", instance_pk, epoch, os.getpid(), real_time(released), outcome)


class LapsedLeases(logging.Handler):
    """Records each lease its holder counted lapsed unrenewed (the replay's warning that says so):
    from then on its replay wrote nothing and started no step body, and another worker may take the
    instance over, even while this process lives on."""

    def emit(self, record: logging.LogRecord) -> None:
        lapsed_at = getattr(record, "lapsed_at", None)
        if lapsed_at is not None:
            log("lapsed", record.instance_pk, record.epoch, os.getpid(), real_time(lapsed_at))


def worker_spawned(sender, proc_name, **kwargs):
    """A django-q2 worker process started: a marker file tells it from the pusher and the monitor."""
    open(os.path.join(os.environ[LOG_DIR_VARIABLE], f"q2-worker-{os.getpid()}"), "w").close()


def planned_failures_so_far(workflow_name: str, instance_id: str, key: str) -> int:
    from django_workflows.models import Step

    attempts = (
        Step.objects.filter(instance__workflow_name=workflow_name, instance__instance_id=instance_id, key=key)
        .values_list("attempts", flat=True).first()
    ) or []
    return sum(1 for a in attempts if PLANNED_FAILURE in (a.get("error") or {}).get("message", ""))


# Step configs: retries come quickly, and a flaky step has room for attempts that a database restart
# fails on top of its planned failures.
QUICK_RETRIES = {"retries": {"limit": 5, "delay": "1 second", "backoff": "constant"}, "timeout": "1 minute"}


class ChaosMix(WorkflowEntrypoint):
    """Plain steps, a step of ``long_ms`` (the long-step cohort), a step that fails ``failures`` times
    before it succeeds, a sleep, then ``events`` waits for events, and a summary step; the params say
    how many of each.

    Output: ``{"steps": [...], "events": [payloads in the order received], "total": sum of steps}``.
    """

    def run(self, event, step):
        iid, params = event.instance_id, event.payload
        busy = params.get("busy_ms", 0)
        results = []
        for n in range(params["steps"]):
            results.append(step.do("work", lambda n=n: side_effect(iid, f"work-{n + 1}", lambda: n * n, busy),
                                   config=QUICK_RETRIES))

        long_ms = params.get("long_ms", 0)
        if long_ms:
            # Longer than WEDGE_SECONDS: a cluster whose every worker is inside such a step is busy.
            results.append(step.do("long", lambda: side_effect(iid, "long-1", lambda: long_ms, long_ms),
                                   config=QUICK_RETRIES))

        failures = params["failures"]
        if failures:
            def flaky():
                failed = planned_failures_so_far(event.workflow_name, iid, "flaky-1")
                if failed < failures:
                    raise ValueError(f"{PLANNED_FAILURE} {failed + 1} of {failures}")
                return failures

            results.append(step.do("flaky", lambda: side_effect(iid, "flaky-1", flaky, busy), config={
                "retries": {"limit": failures + 5, "delay": "1 second", "backoff": "constant"},
                "timeout": "1 minute",
            }))

        if params["sleep"]:
            step.sleep("nap", f"{params['sleep']} seconds")

        received = [step.wait_for_event("ping", EVENT_TYPE, timeout="1 hour").payload
                    for _ in range(params["events"])]
        total = step.do("summary", lambda: side_effect(iid, "summary-1", lambda: sum(results), busy),
                        config=QUICK_RETRIES)
        return {"steps": results, "events": received, "total": total}


def expected_output(instance_id: str, params: dict) -> dict:
    steps = [n * n for n in range(params["steps"])] + ([params["long_ms"]] if params.get("long_ms") else [])
    steps += [params["failures"]] if params["failures"] else []
    events = [{"instance": instance_id, "n": n} for n in range(params["events"])]
    return {"steps": steps, "events": events, "total": sum(steps)}


def expected_step_keys(params: dict) -> set[str]:
    keys = {f"work-{n + 1}" for n in range(params["steps"])} | {"summary-1"}
    if params.get("long_ms"):
        keys.add("long-1")
    if params["failures"]:
        keys.add("flaky-1")
    if params["sleep"]:
        keys.add("nap-1")
    keys |= {f"ping-{n + 1}" for n in range(params["events"])}
    return keys
