"""``manage.py workflows``: every subcommand, its --json form, and each error with its exit code."""

import getpass
import io
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from django_workflows import workflows
from django_workflows.reading.describe import describe_instance, describe_workflow, instance_summary, status_counts
from django_workflows.models import Event, Instance, Step

ROOT = Path(__file__).resolve().parents[2]


def run(*args) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_json(*args):
    return json.loads(run(*args, "--json"))


def as_json(described):
    """Describe data as --json prints it: datetimes in ISO 8601, as ``datetime.isoformat()`` writes them."""
    return json.loads(json.dumps(described, default=datetime.isoformat))


def refused(*args) -> CommandError:
    with pytest.raises(CommandError) as info:
        run(*args)
    return info.value


def tables() -> dict:
    """Every row of the instance, journal and event inbox tables: a refused command must change none."""
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in (Instance, Step, Event)}


def rows_of(text: str, first_header: str) -> list[dict]:
    """The rows of the text table whose header starts with ``first_header``, as dicts by header."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header + " "))
    headers = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("("):
            break
        rows.append(dict(zip(headers, re.split(r"\s{2,}", line.strip()), strict=True)))
    return rows


def field(text: str, label: str) -> str:
    match = re.search(rf"^{re.escape(label)} +(.*)$", text, re.MULTILINE)
    assert match, f"no {label!r} line in:\n{text}"
    return match.group(1)


def waiting_approval(workflows_env, id=None):
    instance = workflows.get("approval").create(id=id, params={})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    return instance


def completed(workflows_env, id=None, params=None):
    instance = workflows.get("three-steps").create(id=id, params=params)
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "complete"
    return instance


# -- list and describe ----------------------------------------------------------------------------

def test_list_counts_instances_per_status(workflows_env):
    completed(workflows_env)
    completed(workflows_env)
    waiting_approval(workflows_env)
    workflows.get("sleeper").create(params={})
    by_workflow = {row["WORKFLOW"]: row for row in rows_of(run("list"), "WORKFLOW")}
    assert set(by_workflow) == set(workflows.names())
    assert by_workflow["three-steps"]["TOTAL"] == "2" and by_workflow["three-steps"]["complete"] == "2"
    assert by_workflow["approval"]["waiting"] == "1" and by_workflow["approval"]["complete"] == "0"
    assert by_workflow["sleeper"]["queued"] == "1"
    assert by_workflow["flaky"]["TOTAL"] == "0"


def test_list_json_is_the_status_counts(workflows_env):
    completed(workflows_env)
    data = run_json("list")
    assert data == status_counts()
    assert data["three-steps"]["complete"] == 1


def test_describe_a_workflow(workflows_env):
    completed(workflows_env)
    text = run("describe", "three-steps")
    assert field(text, "Class") == "tests.testapp.workflows.ThreeSteps"
    assert field(text, "Step limit") == "10000 (the STEP_LIMIT setting)"
    assert field(text, "Instances") == "1"
    assert {row["STATUS"]: row["INSTANCES"] for row in rows_of(text, "STATUS")}["complete"] == "1"
    limited = run("describe", "limited")
    assert field(limited, "Step limit") == "3"
    assert field(run("describe", "flaky"), "Description").startswith("Fails ``failures`` times")


def test_describe_json_is_the_workflow_description(workflows_env):
    waiting_approval(workflows_env)
    data = run_json("describe", "approval")
    assert data == describe_workflow("approval")
    assert data["instances"]["waiting"] == 1


def test_describe_an_unknown_workflow(workflows_env):
    error = refused("describe", "nope")
    assert error.returncode == 1
    assert "No workflow named 'nope'. Known workflows: approval" in str(error)


# -- trigger --------------------------------------------------------------------------------------

def test_trigger_prints_the_new_instance_id(workflows_env):
    instance_id = run("trigger", "three-steps").strip()
    instance = Instance.objects.get()
    assert instance.instance_id == instance_id and len(instance_id) == 36
    assert instance.workflow_name == "three-steps" and instance.params is None
    workflows_env.run_until_idle()
    assert workflows.get("three-steps").get(instance_id).status()["status"] == "complete"


def test_trigger_with_params_and_an_id(workflows_env):
    printed = run("trigger", "three-steps", '{"order": 42, "items": ["a", "b"]}', "--id", "order-42")
    assert printed == "order-42\n"
    workflows_env.run_until_idle()
    output = workflows.get("three-steps").get("order-42").status()["output"]
    assert output["params"] == {"order": 42, "items": ["a", "b"]}


def test_trigger_json_describes_the_queued_instance(workflows_env):
    data = run_json("trigger", "sleeper", '{"duration": "1 hour"}', "--id", "nap-1")
    assert data == as_json(describe_instance(Instance.objects.get(instance_id="nap-1")))
    assert data["status"] == "queued" and data["params"] == {"duration": "1 hour"} and data["steps"] == []


def test_trigger_an_existing_id_is_refused_and_changes_nothing(workflows_env):
    completed(workflows_env, id="order-1", params={"first": True})
    before = tables()
    error = refused("trigger", "three-steps", '{"first": false}', "--id", "order-1")
    assert error.returncode == 1
    assert "already has an instance with id 'order-1'" in str(error)
    assert tables() == before


@pytest.mark.parametrize("bad_id", ["has space", "-dash-first", "x" * 101])
def test_trigger_an_invalid_id_is_refused(workflows_env, bad_id):
    # --id=VALUE, as argparse reads a separate value starting with "-" as another option.
    error = refused("trigger", "three-steps", f"--id={bad_id}")
    assert error.returncode == 1 and "Invalid instance id" in str(error)
    assert not Instance.objects.exists()


def test_trigger_params_that_are_not_json_say_where(workflows_env):
    error = refused("trigger", "three-steps", '{"a": 1 "b": 2}')
    message = str(error)
    assert "argument PARAMS_JSON: not valid JSON: Expecting ',' delimiter: line 1 column 9" in message
    # The offending line, with a caret under the character where parsing stopped.
    excerpt, caret = message.splitlines()[-2:]
    assert excerpt.strip() == '{"a": 1 "b": 2}' and caret.index("^") == excerpt.index('"b"')
    assert not Instance.objects.exists()


def test_trigger_params_not_json_on_a_later_line(workflows_env):
    message = str(refused("trigger", "three-steps", '{\n  "a": [1,\n    2,,]}'))
    assert "line 3 column 7" in message
    assert message.splitlines()[-2].strip() == "2,,]}"
    assert not Instance.objects.exists()


def test_trigger_empty_params_is_a_usage_error(workflows_env):
    assert "argument PARAMS_JSON: not valid JSON: it is empty" in str(refused("trigger", "three-steps", ""))
    assert not Instance.objects.exists()


def test_trigger_params_over_the_size_limit_are_refused(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"MAX_PARAMS_SIZE": 10}
    error = refused("trigger", "three-steps", json.dumps({"text": "x" * 20}))
    assert error.returncode == 1 and "over the limit of 10 bytes" in str(error)
    assert not Instance.objects.exists()


def test_trigger_an_unknown_workflow(workflows_env):
    assert "No workflow named 'nope'" in str(refused("trigger", "nope", "{}"))
    assert not Instance.objects.exists()


# -- instances list -------------------------------------------------------------------------------

def test_instances_list_newest_first(workflows_env):
    completed(workflows_env, id="first")
    workflows_env.advance("1 minute")
    completed(workflows_env, id="second")
    completed(workflows_env, id="same-moment")  # created at the same time as "second": the later row is newer
    workflows_env.advance("1 minute")
    completed(workflows_env, id="third")
    rows = rows_of(run("instances", "list", "three-steps"), "ID")
    assert [row["ID"] for row in rows] == ["third", "same-moment", "second", "first"]
    assert rows[0]["STATUS"] == "complete" and rows[0]["END"].endswith("Z")


def test_instances_list_filters_by_status(workflows_env):
    waiting_approval(workflows_env, id="waits")
    paused = waiting_approval(workflows_env, id="paused")
    paused.pause()
    rows = rows_of(run("instances", "list", "approval", "--status", "paused"), "ID")
    assert [(row["ID"], row["STATUS"]) for row in rows] == [("paused", "paused")]
    none = run("instances", "list", "approval", "--status", "complete")
    assert none == "No instances of 'approval' match.\n"


def test_instances_list_limit_says_there_are_more(workflows_env):
    for n in range(3):
        workflows.get("sleeper").create(id=f"s{n}", params={})
        workflows_env.advance("1 second")
    text = run("instances", "list", "sleeper", "--limit", "2")
    assert [row["ID"] for row in rows_of(text, "ID")] == ["s2", "s1"]
    assert "(newest 2 shown; raise --limit for more)" in text
    assert "raise --limit" not in run("instances", "list", "sleeper", "--limit", "3")


def test_instances_list_json(workflows_env):
    waiting_approval(workflows_env, id="a1")
    workflows_env.advance("1 second")
    waiting_approval(workflows_env, id="a2")
    data = run_json("instances", "list", "approval", "--limit", "1")
    assert data == [as_json(instance_summary(Instance.objects.get(instance_id="a2")))]
    assert data[0]["current_step"] == "approval-1" and data[0]["wake_at"] is not None


def test_instances_list_usage_errors(workflows_env):
    assert "argument --status: invalid choice: 'done'" in str(refused("instances", "list", "approval",
                                                                      "--status", "done"))
    assert "argument --limit: must be a whole number of 1 or more, got '0'" in str(
        refused("instances", "list", "approval", "--limit", "0"))
    assert "No workflow named 'nope'" in str(refused("instances", "list", "nope"))


# -- instances describe ---------------------------------------------------------------------------

def test_instances_describe_a_waiting_instance(workflows_env):
    instance = waiting_approval(workflows_env, id="order-7")
    instance.send_event(type="unrelated", payload=1, sender="api:alice")
    text = run("instances", "describe", "approval", "order-7")
    assert field(text, "Status") == "waiting"
    assert field(text, "Current step") == "approval-1"
    assert field(text, "Params") == "{}" and field(text, "Output") == "null" and field(text, "Error") == "-"
    # The wake time of a wait for an event is its deadline: 72 hours on.
    deadline = workflows_env.now.astimezone(UTC) + timedelta(hours=72)
    assert field(text, "Wakes") == deadline.strftime("%Y-%m-%dT%H:%M:%SZ")
    steps = rows_of(text, "STEP")
    assert [(s["STEP"], s["TYPE"], s["STATUS"], s["ATTEMPTS"]) for s in steps] == [
        ("ask-1", "do", "succeeded", "1"), ("approval-1", "waitForEvent", "waiting", "-")]
    assert steps[1]["END"] == "-" and steps[1]["LAST ERROR"] == "-"
    events = rows_of(text, "EVENT")
    assert events == [{"EVENT": "unrelated", "RECEIVED": events[0]["RECEIVED"], "SENDER": "api:alice",
                       "CONSUMED BY": "(in the inbox)"}]


def test_instances_describe_an_errored_instance(workflows_env):
    instance = workflows.get("uncaught").create(id="broken")
    workflows_env.run_until_idle()
    text = run("instances", "describe", "uncaught", "broken")
    assert field(text, "Status") == "errored"
    assert field(text, "Error") == "RuntimeError: it broke"
    [step] = rows_of(text, "STEP")
    assert (step["STATUS"], step["ATTEMPTS"], step["LAST ERROR"]) == ("failed", "1", "RuntimeError: it broke")
    assert instance.status()["error"] == {"name": "RuntimeError", "message": "it broke"}


def test_instances_describe_shows_attempts_and_the_last_error_of_a_retrying_step(workflows_env):
    retries = {"limit": 5, "delay": "1 minute", "backoff": "constant"}
    workflows.get("flaky").create(id="f", params={"failures": 5, "config": {"retries": retries}})
    workflows_env.run_until_idle()
    workflows_env.advance("1 minute")
    [step] = rows_of(run("instances", "describe", "flaky", "f"), "STEP")
    assert step["STATUS"] == "retrying" and step["ATTEMPTS"] == "2"
    assert step["LAST ERROR"] == "ValueError: failure 2"


def test_instances_describe_a_consumed_event(workflows_env):
    instance = waiting_approval(workflows_env, id="done")
    instance.send_event(type="manager-approval", payload={"outcome": "approved"}, sender="cli:ops")
    workflows_env.run_until_idle()
    text = run("instances", "describe", "approval", "done")
    assert field(text, "Status") == "complete"
    assert json.loads(field(text, "Output"))["status"] == "approved"
    [event] = rows_of(text, "EVENT")
    assert event["CONSUMED BY"] == "approval-1" and event["SENDER"] == "cli:ops"


def test_instances_describe_latest_is_the_newest_instance(workflows_env):
    completed(workflows_env, id="older", params={"n": 1})
    workflows_env.advance("1 minute")
    completed(workflows_env, id="newer", params={"n": 2})
    workflows.get("sleeper").create(id="other-workflow", params={})  # newer still, but another workflow
    assert field(run("instances", "describe", "three-steps", "latest"), "Instance") == "newer"
    assert run_json("instances", "describe", "three-steps", "latest") == as_json(describe_instance(
        Instance.objects.get(instance_id="newer")))


def test_instances_describe_json(workflows_env):
    completed(workflows_env, id="x")
    data = run_json("instances", "describe", "three-steps", "x")
    assert data == as_json(describe_instance(Instance.objects.get(instance_id="x")))
    assert [step["key"] for step in data["steps"]] == ["a-1", "b-1", "c-1"]


def test_instances_describe_errors(workflows_env):
    assert "no instances yet, so there is no latest one" in str(
        refused("instances", "describe", "flaky", "latest"))
    assert "Workflow 'three-steps' has no instance with id 'missing'" in str(
        refused("instances", "describe", "three-steps", "missing"))
    assert "Invalid instance id 'not an id'" in str(
        refused("instances", "describe", "three-steps", "not an id"))
    assert "No workflow named 'nope'" in str(refused("instances", "describe", "nope", "latest"))


# -- instances send-event -------------------------------------------------------------------------

def test_send_event_delivers_it_and_records_the_os_user(workflows_env, monkeypatch):
    monkeypatch.setenv("LOGNAME", "ada")
    instance = waiting_approval(workflows_env, id="order-9")
    text = run("instances", "send-event", "approval", "order-9", "--type", "manager-approval",
               "--payload", '{"outcome": "rejected"}')
    assert text == "Sent event 'manager-approval' to approval/order-9; it is queued.\n"
    event = Event.objects.get()
    assert (event.type, event.payload) == ("manager-approval", {"outcome": "rejected"})
    assert event.sender == "cli:ada"
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "rejected"


def test_send_event_json_and_an_event_kept_in_the_inbox(workflows_env):
    waiting_approval(workflows_env, id="order-10")
    data = run_json("instances", "send-event", "approval", "order-10", "--type", "reminder")
    sender = f"cli:{getpass.getuser()}"
    assert data == {"accepted": True, "type": "reminder", "sender": sender,
                    "instance": as_json(instance_summary(Instance.objects.get(instance_id="order-10")))}
    # Not the type it waits for: kept in the inbox, and the instance still waits.
    assert data["instance"]["status"] == "waiting"
    assert Event.objects.get().payload is None and Event.objects.get().sender == sender


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--type", "bad type"], "Invalid event type 'bad type'"),
        (["--type=-dash"], "Invalid event type '-dash'"),
        (["--type", "manager-approval", "--payload", "{outcome: yes}"],
         "argument --payload: not valid JSON: Expecting property name enclosed in double quotes: "
         "line 1 column 2"),
        ([], "the following arguments are required: --type"),
    ],
)
def test_send_event_bad_input_is_refused_and_changes_nothing(workflows_env, args, fragment):
    waiting_approval(workflows_env, id="order-11")
    before = tables()
    error = refused("instances", "send-event", "approval", "order-11", *args)
    assert fragment in str(error)
    assert tables() == before


def test_send_event_to_a_finished_instance_is_refused(workflows_env):
    completed(workflows_env, id="finished")
    before = tables()
    error = refused("instances", "send-event", "three-steps", "finished", "--type", "late")
    assert error.returncode == 1
    assert "Cannot send event 'late' to instance three-steps/finished: it is complete" in str(error)
    assert tables() == before


def test_send_event_to_an_unknown_instance(workflows_env):
    error = refused("instances", "send-event", "approval", "missing", "--type", "manager-approval")
    assert "Workflow 'approval' has no instance with id 'missing'" in str(error)
    assert not Event.objects.exists()


# -- instances pause, resume, terminate, restart ----------------------------------------------------

def test_pause_and_resume(workflows_env):
    instance = waiting_approval(workflows_env, id="p")
    assert run("instances", "pause", "approval", "p") == "Paused approval/p; it is paused.\n"
    assert instance.status()["status"] == "paused"
    # A paused instance does not wake at its event's deadline.
    workflows_env.advance("100 hours")
    assert instance.status()["status"] == "paused"
    data = run_json("instances", "resume", "approval", "p")
    assert data == as_json(instance_summary(Instance.objects.get(instance_id="p")))
    assert data["status"] == "queued"
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"status": "expired"}


def test_terminate(workflows_env):
    instance = waiting_approval(workflows_env, id="t")
    assert run("instances", "terminate", "approval", "t") == "Terminated approval/t; it is terminated.\n"
    workflows_env.advance("100 hours")
    assert instance.status()["status"] == "terminated"
    assert Instance.objects.get(instance_id="t").wake_at is None


def test_restart_clears_the_journal_and_runs_from_the_top(workflows_env):
    instance = workflows.get("uncaught").create(id="r")
    workflows_env.run_until_idle()
    data = run_json("instances", "restart", "uncaught", "r")
    assert data["status"] == "queued" and data["end"] is None
    assert not Step.objects.exists()
    assert run("instances", "restart", "uncaught", "r") == "Restarted uncaught/r; it is queued.\n"
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "errored"
    assert Step.objects.get().attempts[0]["attempt"] == 1


@pytest.mark.parametrize(
    "action, setup, status, allowed",
    [
        ("pause", completed, "complete", "queued or running or waiting"),
        ("resume", waiting_approval, "waiting", "paused or waitingForPause"),
        ("terminate", completed, "complete", "scheduled or queued or running or paused"),
    ],
)
def test_a_transition_not_allowed_is_refused_and_changes_nothing(workflows_env, action, setup, status,
                                                                  allowed):
    instance = setup(workflows_env, id="i")
    before = tables()
    error = refused("instances", action, instance.workflow_name, "i")
    assert error.returncode == 1
    assert f"Cannot {action} instance {instance.workflow_name}/i: it is {status}; {action} applies to an " \
           f"instance that is {allowed}" in str(error)
    assert tables() == before


@pytest.mark.parametrize("action", ["pause", "resume", "terminate", "restart"])
def test_transitions_of_unknown_or_invalid_instances(workflows_env, action):
    completed(workflows_env, id="exists")
    before = tables()
    assert "Workflow 'three-steps' has no instance with id 'missing'" in str(
        refused("instances", action, "three-steps", "missing"))
    assert "Invalid instance id 'bad/id'" in str(refused("instances", action, "three-steps", "bad/id"))
    assert "No workflow named 'nope'" in str(refused("instances", action, "nope", "exists"))
    assert "the following arguments are required: ID" in str(refused("instances", action, "three-steps"))
    assert tables() == before


def test_a_missing_subcommand_is_a_usage_error(db):
    assert "the following arguments are required: COMMAND" in str(refused())
    assert "the following arguments are required: ACTION" in str(refused("instances"))
    assert "invalid choice: 'start'" in str(refused("start"))


# -- a real command line: exit codes and no tracebacks --------------------------------------------

def manage(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings",
           "TEST_DATABASE_NAME": str(connection.settings_dict["NAME"]), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "django", "workflows", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.django_db(transaction=True)
def test_exit_codes_of_a_real_command_line(workflows_env):
    completed(workflows_env, id="done")

    created = manage("trigger", "three-steps", '{"n": 1}', "--id", "from-shell")
    assert created.returncode == 0, created.stderr
    assert created.stdout == "from-shell\n"
    assert Instance.objects.get(instance_id="from-shell").params == {"n": 1}

    before = tables()
    for args, code, fragment in [
        (["trigger", "three-steps", '{"n": 1,}'], 2, "error: argument PARAMS_JSON: not valid JSON"),
        (["instances", "list", "three-steps", "--status", "over"], 2, "argument --status: invalid choice"),
        (["instances"], 2, "the following arguments are required: ACTION"),
        (["trigger", "three-steps", "--id", "done"], 1, "CommandError: Workflow 'three-steps' already has"),
        (["instances", "pause", "three-steps", "done"], 1,
         "CommandError: Cannot pause instance three-steps/done"),
        (["instances", "describe", "nope", "latest"], 1, "CommandError: No workflow named 'nope'"),
        (["instances", "send-event", "three-steps", "done", "--type", "bad type"], 1,
         "CommandError: Invalid event type 'bad type'"),
    ]:
        result = manage(*args)
        assert (result.returncode, fragment in result.stderr) == (code, True), (args, result.stderr)
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert tables() == before

    described = manage("instances", "describe", "three-steps", "done", "--json")
    assert described.returncode == 0, described.stderr
    done = Instance.objects.get(instance_id="done")
    assert json.loads(described.stdout) == as_json(describe_instance(done))
