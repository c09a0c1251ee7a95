"""CPU time: each step attempt's CPU and wall time in the journal, the instance's totals, and the
``cpu_time_limit`` a replay may use, which stops it at the next step boundary. Waiting does not count."""

import io
import json
import re
import select
import socket
import time

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from django_workflows import CpuTimeLimitExceeded, WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.reading.drawing.time_axis import human_milliseconds
from django_workflows.models import Instance, Step
from django_workflows.engine.replay import replay
from tests.testapp.workflows import calls

LIMIT_MESSAGE = re.compile(
    r"^Instance (?P<instance>\S+) used (?P<used>\d+\.\d+) s of CPU in one replay, over its cpu_time_limit of "
    r"(?P<limit>[\d.]+) s; it was stopped at step '(?P<step>[^']+)'\."
)


def burn(seconds: float) -> int:
    """Keep this thread busy until it has used ``seconds`` more of CPU time."""
    until = time.thread_time() + seconds
    spins = 0
    while time.thread_time() < until:
        spins += 1
    return spins


def wait_on_a_socket(seconds: float) -> bool:
    """Wait for data that never comes, on a socket: time spent waiting on I/O, not computing."""
    reader, writer = socket.socketpair()
    try:
        readable, _, _ = select.select([reader], [], [], seconds)
        return bool(readable)
    finally:
        reader.close()
        writer.close()


class BurnsCpu(WorkflowEntrypoint):
    """One step uses more CPU than the replay may; the step after it is never run."""

    name = "burns-cpu"
    cpu_time_limit = 200  # milliseconds, as Cloudflare's limits.cpu_ms

    def run(self, event, step):
        step.do("burn", lambda: burn(event.payload["burn"]))
        step.do("after", lambda: calls.update(["after"]) or "ran")
        return "done"


class BurnsSideBySide(WorkflowEntrypoint):
    """Two steps side by side, each within the limit, together over it: their CPU was used in other
    threads, and counts toward the replay all the same."""

    name = "burns-side-by-side"
    cpu_time_limit = "200 milliseconds"

    def run(self, event, step):
        step.all([("left", lambda: burn(0.15)), ("right", lambda: burn(0.15))])
        step.do("after", lambda: calls.update(["after"]) or "ran")
        return "done"


class BurnsThenRetries(WorkflowEntrypoint):
    """A failing attempt uses up the limit; its retry, due at once, is a step boundary too."""

    name = "burns-then-retries"
    cpu_time_limit = 200

    def run(self, event, step):
        def flaky():
            calls.update(["flaky"])
            burn(0.25)
            raise ValueError("not yet")

        return step.do("flaky", flaky, config={"retries": {"limit": 3, "delay": 0}})


class WaitsOnIo(WorkflowEntrypoint):
    """Waits longer than its CPU time limit, sleeping and on a socket: waiting does not count."""

    name = "waits-on-io"
    cpu_time_limit = 200

    def run(self, event, step):
        step.do("nap", lambda: time.sleep(0.3))
        step.do("socket", lambda: wait_on_a_socket(0.3))
        step.do("after", lambda: calls.update(["after"]) or "ran")
        return "done"


class BurnsAcrossSleeps(WorkflowEntrypoint):
    """Each replay stays within the limit; the instance, over its two replays, does not."""

    name = "burns-across-sleeps"
    cpu_time_limit = 200

    def run(self, event, step):
        step.do("before", lambda: burn(0.15) and "before")
        step.sleep("rest", "1 hour")
        step.do("after", lambda: burn(0.15) and "after")
        return "done"


class ByTheSetting(WorkflowEntrypoint):
    """No cpu_time_limit of its own: the CPU_TIME_LIMIT setting applies."""

    name = "cpu-by-the-setting"

    def run(self, event, step):
        step.do("burn", lambda: burn(event.payload["burn"]))
        step.do("after", lambda: calls.update(["after"]) or "ran")
        return "done"


def attempts_of(instance, name: str) -> list[dict]:
    return Step.objects.get(instance_id=instance.pk, name=name).attempts


def row(instance) -> Instance:
    return Instance.objects.get(pk=instance.pk)


# -- the limit ------------------------------------------------------------------------------------

def test_a_step_that_burns_cpu_past_the_limit_errors_the_instance_at_the_next_step(workflows_env):
    instance = workflows.get("burns-cpu").create(id="hot", params={"burn": 0.3})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored"
    assert status["error"]["name"] == "CpuTimeLimitExceeded"
    message = LIMIT_MESSAGE.match(status["error"]["message"])
    assert message, status["error"]["message"]
    assert (message["instance"], message["limit"], message["step"]) == ("burns-cpu/hot", "0.2", "after-1")
    assert float(message["used"]) >= 0.3
    # The step that burned was journaled, with what it used; the one after it never ran.
    [burned] = attempts_of(instance, "burn")
    assert burned["success"] is True and burned["cpu_ms"] >= 300
    assert calls["after"] == 0
    assert not Step.objects.filter(instance_id=instance.pk, name="after").exists()
    # The replay that errored added what it used to the instance's totals.
    assert row(instance).cpu_ms >= burned["cpu_ms"]


def test_within_the_limit_the_same_workflow_completes(workflows_env):
    instance = workflows.get("burns-cpu").create(params={"burn": 0.05})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"
    assert calls["after"] == 1


def test_the_limit_error_is_a_workflow_error():
    from django_workflows.errors import WorkflowError

    assert issubclass(CpuTimeLimitExceeded, WorkflowError)


def test_waiting_on_io_longer_than_the_limit_does_not_count(workflows_env):
    instance = workflows.get("waits-on-io").create()
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"
    assert calls["after"] == 1
    for name in ("nap", "socket"):
        [attempt] = attempts_of(instance, name)
        # Waited 300 ms, longer than the 200 ms limit, using a small part of that in CPU.
        assert attempt["wall_ms"] >= 300
        assert 0 <= attempt["cpu_ms"] < attempt["wall_ms"] / 2
    totals = row(instance)
    assert totals.step_wall_ms >= 600
    assert 0 < totals.cpu_ms < 200


def test_cpu_used_in_other_threads_by_step_all_counts_toward_the_replay(workflows_env):
    instance = workflows.get("burns-side-by-side").create()
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored" and status["error"]["name"] == "CpuTimeLimitExceeded"
    assert LIMIT_MESSAGE.match(status["error"]["message"])["step"] == "after-1"
    assert calls["after"] == 0
    left, right = attempts_of(instance, "left"), attempts_of(instance, "right")
    assert left[0]["cpu_ms"] >= 150 and right[0]["cpu_ms"] >= 150
    # Both threads' CPU is in the instance's total, though the replay's own thread only waited for them.
    assert row(instance).cpu_ms >= 300


def test_a_retry_due_at_once_is_a_step_boundary_and_the_attempts_that_ran_are_journaled(workflows_env):
    instance = workflows.get("burns-then-retries").create()
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored" and status["error"]["name"] == "CpuTimeLimitExceeded"
    assert LIMIT_MESSAGE.match(status["error"]["message"])["step"] == "flaky-1"
    assert calls["flaky"] == 1  # three retries were allowed; none ran
    [attempt] = attempts_of(instance, "flaky")
    assert attempt["success"] is False and attempt["error"]["message"] == "not yet"
    assert attempt["cpu_ms"] >= 250


def test_the_limit_is_per_replay_and_the_totals_add_up_over_replays(workflows_env):
    instance = workflows.get("burns-across-sleeps").create()
    workflows_env.run_until_idle()
    first = row(instance)
    assert first.status == "waiting" and first.cpu_ms >= 150
    workflows_env.advance("1 hour")
    assert instance.status()["output"] == "done"
    both = row(instance)
    # 300 ms over the instance's life, more than the 200 ms one replay may use.
    assert both.cpu_ms >= first.cpu_ms + 150 >= 300
    walls = [a["wall_ms"] for name in ("before", "after") for a in attempts_of(instance, name)]
    assert both.step_wall_ms == pytest.approx(sum(walls), abs=0.01)


def test_the_setting_applies_to_a_workflow_without_its_own_limit(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"CPU_TIME_LIMIT": 150}
    instance = workflows.get("cpu-by-the-setting").create(params={"burn": 0.2})
    workflows_env.run_until_idle()
    message = LIMIT_MESSAGE.match(instance.status()["error"]["message"])
    assert message["limit"] == "0.15" and message["step"] == "after-1"
    assert calls["after"] == 0


def test_the_default_limit_of_30_seconds_lets_a_busy_step_through(workflows_env):
    instance = workflows.get("cpu-by-the-setting").create(params={"burn": 0.25})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "done"


class BadLimit(WorkflowEntrypoint):
    name = "bad-cpu-limit"
    cpu_time_limit = "forever"

    def run(self, event, step):
        return step.do("never", lambda: calls.update(["never"]))


# Registered only for the test that uses it: the system checks of the rest of the suite would report it.
registry.unregister(BadLimit)


@pytest.fixture
def bad_limit():
    registry.register(BadLimit)
    yield
    registry.unregister(BadLimit)


def test_a_limit_the_check_would_refuse_errors_the_instance_before_anything_runs(workflows_env, bad_limit):
    instance = workflows.get("bad-cpu-limit").create()
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored" and status["error"]["name"] == "WorkflowConfigError"
    assert "BadLimit.cpu_time_limit: cannot parse 'forever'" in status["error"]["message"]
    assert calls["never"] == 0


# -- the figures ----------------------------------------------------------------------------------

def test_every_attempt_carries_its_cpu_and_wall_time_and_the_instance_totals_them(workflows_env):
    instance = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    attempts = [a for step in Step.objects.filter(instance_id=instance.pk) for a in step.attempts]
    assert len(attempts) == 3
    for attempt in attempts:
        # (jsonb keeps keys in an order of its own)
        assert set(attempt) == {"attempt", "start", "end", "success", "cpu_ms", "wall_ms"}
        assert isinstance(attempt["cpu_ms"], float) and attempt["cpu_ms"] >= 0
        assert isinstance(attempt["wall_ms"], float) and attempt["wall_ms"] >= attempt["cpu_ms"] - 0.01
    totals = row(instance)
    # The replay's CPU: its step bodies, and run() and the engine around them.
    assert totals.cpu_ms > 0
    assert totals.cpu_ms >= sum(a["cpu_ms"] for a in attempts) - 0.01
    assert totals.step_wall_ms == pytest.approx(sum(a["wall_ms"] for a in attempts), abs=0.01)


def test_an_attempts_cpu_time_never_reads_more_than_its_wall_time(workflows_env, monkeypatch):
    # The thread's CPU clock and the wall clock are different clocks: on a virtual machine the first can
    # run ahead of the second by microseconds. Here it runs at twice the speed of the thread's real CPU,
    # and a short step's figures must still read CPU <= wall.
    real_thread_time = time.thread_time
    monkeypatch.setattr(time, "thread_time", lambda: 2 * real_thread_time())
    instance = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    attempts = [a for step in Step.objects.filter(instance_id=instance.pk) for a in step.attempts]
    assert len(attempts) == 3
    for attempt in attempts:
        assert 0 <= attempt["cpu_ms"] <= attempt["wall_ms"]


def test_a_failed_attempt_carries_its_figures_too(workflows_env):
    retry_at_once = {"retries": {"limit": 1, "delay": 0}}
    instance = workflows.get("flaky").create(params={"failures": 1, "config": retry_at_once})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == "ok"
    failed, succeeded = attempts_of(instance, "flaky")
    assert (failed["success"], succeeded["success"]) == (False, True)
    assert {"cpu_ms", "wall_ms"} <= set(failed) and {"cpu_ms", "wall_ms"} <= set(succeeded)
    assert row(instance).step_wall_ms == pytest.approx(failed["wall_ms"] + succeeded["wall_ms"], abs=0.01)


def test_the_totals_cost_no_statement_of_their_own(workflows_env):
    instance = workflows.get("loop").create(params={"n": 3})
    workflows_env.executor.reset()
    with CaptureQueriesContext(connection) as ctx:
        replay(instance.pk)
    statements = [query["sql"] for query in ctx.captured_queries]
    # Take the lease, 3 journal INSERTs, release: as before CPU time was measured.
    assert len(statements) == 5, statements
    assert [sql.startswith("INSERT INTO") for sql in statements[1:4]] == [True] * 3
    assert "cpu_ms = cpu_ms +" in statements[-1] and "step_wall_ms = step_wall_ms +" in statements[-1]
    assert row(instance).cpu_ms > 0


def test_an_instance_inserted_without_the_columns_starts_from_zero(workflows_env):
    # As a worker of the previous release inserts it (and the benchmarks' bulk insert): the database's
    # default fills the columns it does not name.
    now = workflows_env.now
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_workflows_instance (workflow_name, instance_id, status, traceback, "
            "current_step, lease_owner, epoch, crash_count, created_at, updated_at) "
            "VALUES (%s, %s, %s, '', '', '', 0, 0, %s, %s)",
            ["three-steps", "old-worker", "queued", now, now],
        )
    instance = Instance.objects.get(instance_id="old-worker")
    assert (instance.cpu_ms, instance.step_wall_ms) == (0.0, 0.0)
    replay(instance.pk)
    assert row(instance).status == "complete" and row(instance).cpu_ms > 0


# -- where people see them ------------------------------------------------------------------------

@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_api_instance_detail_shows_the_totals_and_each_attempts_figures(workflows_env, api):
    instance = workflows.get("waits-on-io").create(id="io-1")
    workflows_env.run_until_idle()
    body = api.get("/workflows/waits-on-io/instances/io-1/").json()
    totals = row(instance)
    assert body["cpu_ms"] == round(totals.cpu_ms, 3) and body["cpu_ms"] > 0
    assert body["step_wall_ms"] == round(totals.step_wall_ms, 3) and body["step_wall_ms"] >= 600
    nap = body["steps"][0]
    assert nap["key"] == "nap-1"
    assert nap["attempts"][0]["cpu_ms"] == attempts_of(instance, "nap")[0]["cpu_ms"]
    assert nap["attempts"][0]["wall_ms"] >= 300
    assert (nap["cpu_ms"], nap["wall_ms"]) == (nap["attempts"][0]["cpu_ms"], nap["attempts"][0]["wall_ms"])


def test_the_api_shows_a_workflows_own_cpu_time_limit(workflows_env, api):
    assert api.get("/workflows/burns-cpu/").json()["cpu_time_limit_ms"] == 200
    assert api.get("/workflows/burns-side-by-side/").json()["cpu_time_limit_ms"] == 200
    assert api.get("/workflows/three-steps/").json()["cpu_time_limit_ms"] is None


def test_a_sleep_or_a_wait_has_no_figures_and_an_old_attempt_none(workflows_env, api):
    instance = workflows.get("burns-across-sleeps").create(id="s-1")
    workflows_env.run_until_idle()
    # An attempt journaled before attempts were measured, as a previous release wrote it.
    before = Step.objects.get(instance_id=instance.pk, name="before")
    before.attempts = [{key: value for key, value in before.attempts[0].items()
                        if key not in ("cpu_ms", "wall_ms")}]
    before.save(update_fields=["attempts"])
    steps = api.get("/workflows/burns-across-sleeps/instances/s-1/").json()["steps"]
    assert steps[0]["cpu_ms"] is None and "cpu_ms" not in steps[0]["attempts"][0]
    assert steps[1]["type"] == "sleep" and "cpu_ms" not in steps[1]


def run_cli(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def field(text: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)} +(.*)$", text, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{text}"
    return match.group(1)


def test_the_cli_describe_shows_the_totals_and_each_steps_cpu(workflows_env):
    instance = workflows.get("waits-on-io").create(id="io-2")
    workflows_env.run_until_idle()
    totals = row(instance)
    text = run_cli("instances", "describe", "waits-on-io", "io-2")
    # As describe gives them: to the microsecond.
    assert field(text, "CPU time").startswith(human_milliseconds(round(totals.cpu_ms, 3)) + " ")
    assert field(text, "Step time").startswith(human_milliseconds(round(totals.step_wall_ms, 3)) + " ")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("STEP "))
    assert re.split(r"\s{2,}", header)[:6] == ["STEP", "TYPE", "STATUS", "ATTEMPTS", "CPU", "TOOK"]
    nap = re.split(r"\s{2,}", next(line for line in lines if line.startswith("nap-1 ")))
    [attempt] = attempts_of(instance, "nap")
    assert nap[4:6] == [human_milliseconds(attempt["cpu_ms"]), human_milliseconds(attempt["wall_ms"])]
    data = json.loads(run_cli("instances", "describe", "waits-on-io", "io-2", "--json"))
    assert data["cpu_ms"] == round(totals.cpu_ms, 3) and data["step_wall_ms"] == round(totals.step_wall_ms, 3)
    assert data["steps"][0]["attempts"][0]["cpu_ms"] == attempt["cpu_ms"]


def test_the_cli_describes_a_workflows_cpu_time_limit(workflows_env):
    assert field(run_cli("describe", "burns-cpu"), "CPU time limit") == "200 ms per replay"
    assert field(run_cli("describe", "three-steps"), "CPU time limit") == (
        "30 s per replay (the CPU_TIME_LIMIT setting)"
    )


def test_the_admin_instance_page_shows_the_totals_the_limit_and_each_steps_cpu(workflows_env, admin_client):
    instance = workflows.get("waits-on-io").create(id="io-3")
    workflows_env.run_until_idle()
    totals = row(instance)
    url = reverse("admin:django_workflows_instance_change", args=[instance.pk])
    html = admin_client.get(url).content.decode()
    fact = re.search(r'<div class="dw-cpu-fact"><dt>CPU time</dt><dd[^>]*>([^<]+)<span class="dw-quiet">'
                     r"\(limit ([^)]+) a replay\)", html)
    assert fact and fact.groups() == (human_milliseconds(totals.cpu_ms) + " ", "200 ms")
    step_time = re.escape(human_milliseconds(totals.step_wall_ms))
    assert re.search(rf"<dt>Step time</dt><dd[^>]*>{step_time}<", html)
    cpu_cells = re.findall(r'<td class="dw-step-cpu">([^<]+)</td>', html)
    expected = [human_milliseconds(attempts_of(instance, name)[0]["cpu_ms"])
                for name in ("nap", "socket", "after")]
    assert cpu_cells == expected
    # On the timeline, beside each step's bars, and in each attempt's bar title.
    timeline = html[html.index('<svg xmlns="http://www.w3.org/2000/svg" class="dw-timeline"'):]
    beside = re.findall(r'class="dw-cpu-text"[^>]*><title>[^<]*</title>CPU ([^<]+)</text>', timeline)
    assert beside == expected
    assert re.search(rf"<title>nap-1 attempt 1: succeeded after [^<]* · CPU {re.escape(expected[0])}</title>",
                     timeline)


def test_the_admin_list_sorts_by_cpu_time(workflows_env, admin_client):
    for instance_id, seconds in (("warm", 0.02), ("hot", 0.1), ("cool", 0.0)):
        workflows.get("burns-cpu").create(id=instance_id, params={"burn": seconds})
    workflows_env.run_until_idle()
    by_cpu = list(Instance.objects.order_by("cpu_ms").values_list("instance_id", flat=True))
    assert by_cpu[-1] == "hot"
    url = reverse("admin:django_workflows_instance_changelist")
    html = admin_client.get(url).content.decode()
    assert '<th scope="col" class="sortable column-cpu_time">' in html
    # Django 6 gives the header's link a role="button".
    header = re.search(r'class="sortable column-cpu_time">\s*<div class="text"><a [^>]*href="\?o=(\d+)', html)
    column = header.group(1)

    def listed(order: str) -> list[str]:
        page = admin_client.get(url, {"o": order}).content.decode()
        return re.findall(r'<th class="field-instance_id"><a href="[^"]+">([^<]+)</a>', page)

    assert listed(column) == by_cpu
    assert listed(f"-{column}") == by_cpu[::-1]
    cells = re.findall(r'<td class="field-cpu_time"><span class="dw-cpu"[^>]*>([^<]+)</span>',
                       admin_client.get(url, {"o": f"-{column}"}).content.decode())
    assert cells[0] == human_milliseconds(Instance.objects.get(instance_id="hot").cpu_ms)


def test_the_admin_workflow_page_shows_its_own_limit(workflows_env, admin_client):
    url = reverse("admin:django_workflows_instance_workflow", args=["burns-cpu"])
    html = admin_client.get(url).content.decode()
    assert "CPU time limit: 200 ms a replay." in html


@pytest.mark.parametrize("ms, text", [(0.0421, "0.04 ms"), (3.21, "3.2 ms"), (12.3, "12 ms"),
                                      (31_200, "31.2 s"), (95_000, "1 min 35 s")])
def test_figures_read_as_people_read_them(ms, text):
    assert human_milliseconds(ms) == text


class TenQuickSteps(WorkflowEntrypoint):
    name = "ten-quick-steps"
    cpu_time_limit = "30 seconds"

    def run(self, event, step):
        return sum(step.do(f"s{n}", lambda: 1) for n in range(10))


def test_the_limit_is_checked_at_each_step_without_reading_the_thread_s_cpu_clock(workflows_env, monkeypatch):
    """``time.thread_time()`` is a system call: each step's attempt reads it twice (its journaled
    ``cpu_ms``), and the limit's check at each step boundary reads it only once the replay's wall time
    has passed the limit, since a thread cannot use more CPU than that."""
    instance = workflows.get("ten-quick-steps").create(id="quick")
    reads = []
    real = time.thread_time
    monkeypatch.setattr(time, "thread_time", lambda: reads.append(1) or real())
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    # Two for each of the ten attempts, one as the replay starts and one for its total as it ends.
    assert len(reads) == 2 * 10 + 2
