"""What must not take the system down: workflows that raise SystemExit or KeyboardInterrupt, a broken
workflows.py, and finished instances piling up (retention)."""

import json
import sys
import threading
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared import large_values
from django_workflows.surfaces.checks import check_workflows
from django_workflows.shared.definition import discover, registry
from django_workflows.models import Event, Instance, Step
from django_workflows.store.retention import purge_finished


class ExitsInAStep(WorkflowEntrypoint):
    def run(self, event, step):
        def leave():
            raise (SystemExit if event.payload["what"] == "exit" else KeyboardInterrupt)("bye")

        try:
            step.do("leave", leave)
        except Exception as exc:
            return {"caught": type(exc).__name__}


class ExitsInRun(WorkflowEntrypoint):
    def run(self, event, step):
        step.do("first", lambda: 1)
        raise (SystemExit if event.payload["what"] == "exit" else KeyboardInterrupt)()


@pytest.mark.parametrize("what", ["exit", "interrupt"])
def test_system_exit_or_keyboard_interrupt_in_a_step_fails_the_step_not_the_worker(workflows_env, what):
    instance = workflows.get("exits-in-a-step").create(params={"what": what})
    workflows_env.run_until_idle()
    # Not retried, and raised inside run() as an ordinary error that can be caught.
    assert instance.status()["output"] == {"caught": "StepFailed"}
    step = Step.objects.get(instance_id=instance.pk)
    assert len(step.attempts) == 1
    assert step.error["name"] == ("SystemExit" if what == "exit" else "KeyboardInterrupt")


@pytest.mark.parametrize("what", ["exit", "interrupt"])
def test_system_exit_or_keyboard_interrupt_in_run_errors_the_instance(workflows_env, what):
    instance = workflows.get("exits-in-run").create(params={"what": what})
    workflows_env.run_until_idle()
    assert instance.status()["error"]["name"] == ("SystemExit" if what == "exit" else "KeyboardInterrupt")


@pytest.mark.parametrize("source, error", [
    ("raise RuntimeError('syntax of the future')\n", "RuntimeError: syntax of the future"),
    ("def run(:\n    pass\n", "SyntaxError"),
    ("import a_module_that_is_not_there\n", "ModuleNotFoundError"),
    ("import sys\nsys.exit('syntax of the future')\n", "SystemExit: syntax of the future"),
    ("from django_workflows import WorkflowEntrypoint\nclass Half(WorkflowEntrypoint):\n"
     "    def run(self, event, step):\n        pass\nraise ValueError('after a class')\n", "ValueError"),
], ids=["raises", "syntax-error", "missing-import", "sys-exit", "fails-after-a-class"])
def test_a_workflows_module_that_fails_to_import_is_reported_and_the_rest_keep_working(workflows_env, tmp_path,
                                                                                     monkeypatch, settings,
                                                                                     source, error):
    package = tmp_path / "brokenapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "workflows.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "brokenapp"]
    try:
        discover()
        assert "brokenapp.workflows" in registry.import_errors
        [warning] = [m for m in check_workflows() if m.id == "django_workflows.W009"]
        assert error in warning.msg
        # An instance of a workflow that lived there stays queued, for a worker that imports it; the others run.
        instance = workflows.get("three-steps").create()
        Instance.objects.filter(pk=instance.pk).update(workflow_name="from-broken-app")
        other = workflows.get("three-steps").create()
        workflows_env.run_until_idle()
        row = Instance.objects.get(pk=instance.pk)
        assert (row.status, row.epoch, row.error) == ("queued", 0, None)
        assert other.status()["status"] == "complete"
    finally:
        registry.import_errors.pop("brokenapp.workflows", None)
        if "half" in registry.names():
            registry.unregister(registry.get("half"))
        sys.modules.pop("brokenapp.workflows", None)
        sys.modules.pop("brokenapp", None)


def test_retention_deletes_old_finished_instances_in_batches(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": 30, "RETENTION_BATCH": 2}
    old = [workflows.get("three-steps").create() for _ in range(5)]
    waiting = workflows.get("approval").create()
    workflows_env.run_until_idle()
    waiting.send_event(type="unrelated", payload={})
    waiting.pause()  # live for the whole month
    workflows_env.advance("29 days")
    recent = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    assert purge_finished() == 0
    workflows_env.advance("2 days")
    assert purge_finished() == 5
    remaining = set(Instance.objects.values_list("pk", flat=True))
    # The live instance and the recent one are kept, with their journal and inbox.
    assert remaining == {waiting.pk, recent.pk}
    assert waiting.status()["status"] == "paused"
    assert not Step.objects.filter(instance_id__in=[i.pk for i in old]).exists()
    assert Event.objects.filter(instance_id=waiting.pk).count() == 1


def test_retention_can_be_switched_off(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"RETENTION_DAYS": None}
    workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    workflows_env.clock.advance(timedelta(days=400))
    assert purge_finished() == 0


# Hostile input through the API: each is refused with a clear JSON 4xx that changes nothing, or is
# accepted and read back exactly as sent.

SQL = "'; DROP TABLE django_workflows_instance;--"
HTML = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
MIB = 1024 * 1024
API_ERROR_CODES = {
    400: {"invalid_id", "invalid_event_type", "invalid_status", "invalid_page", "malformed_json", "invalid",
          "invalid_params", "invalid_event", "unknown_field", "not_a_list", "empty", "max_length", "null",
          "invalid_choice", "required", "null_characters_not_allowed"},
    404: {"workflow_not_found", "instance_not_found", "not_found"},
    405: {"method_not_allowed"},
    409: {"instance_exists", "transition_not_allowed", "instance_finished"},
    413: {"payload_too_large"},
    415: {"unsupported_media_type"},
}


@pytest.fixture
def hostile_api(db, workflows_env):
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    client = APIClient()
    # No password: hashing one costs a third of a second per test.
    client.force_authenticate(User.objects.create(username="root", is_staff=True, is_superuser=True))
    waiting = workflows.get("approval").create(id="a1", params={"n": 1})
    workflows_env.run_until_idle()
    assert waiting.status()["status"] == "waiting"
    return client


def snapshot():
    """What a refused request must leave as it was."""
    return (
        list(Instance.objects.order_by("pk").values_list("pk", "instance_id", "status", "params", "updated_at")),
        list(Event.objects.order_by("pk").values_list("pk", "type", "payload", "sender")),
        Step.objects.count(),
    )


def send(client, method, path, body=None, content_type="application/json", **headers):
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    return client.generic(method, path, body or b"", content_type=content_type, **headers)


def assert_refused(response, status=None):
    """A 4xx whose body is the API's error shape, with a known code."""
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    error = json.loads(response.content)["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] in API_ERROR_CODES.get(response.status_code, set()) | {"permission_denied"}, error
    if status is not None:
        assert response.status_code == status, (response.status_code, error)
    return error


EVENT = "/workflows/approval/instances/a1/events/manager-approval/"
CREATE = "/workflows/three-steps/instances/"
BATCH = "/workflows/three-steps/instances/batch/"
STATUS = "/workflows/approval/instances/a1/status/"
BODIES = {  # every operation that takes a body, as (method, path, how to wrap a JSON value in it)
    "event": ("POST", EVENT, lambda v: v),
    "create": ("POST", CREATE, lambda v: f'{{"params": {v}}}'),
    "batch": ("POST", BATCH, lambda v: f'[{{"params": {v}}}]'),
    "status": ("PATCH", STATUS, lambda v: f'{{"status": {v}}}'),
}
# JSON texts that must never be stored: not JSON, or JSON the journal refuses.
REFUSED_JSON = {
    "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "nested 100,000 deep in objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "NaN": "NaN",
    "Infinity": "[Infinity, -Infinity]",
    "a float too large for a double": "1e400",
    "an integer of 5,000 digits": "9" * 5000,
    "NUL in a string": '"a\\u0000b"',
    "NUL in a key": '{"\\u0000": 1}',
    "a lone surrogate": '"\\ud800"',
    "a lone low surrogate in a key": '{"\\udc00x": 1}',
    "a truncated document": '{"a": [1, 2',
    "two documents": "{} {}",
    "a single quote": "{'a': 1}",
    "a trailing comma": "[1, 2,]",
}


@pytest.mark.parametrize("operation", sorted(BODIES))
@pytest.mark.parametrize("case", sorted(REFUSED_JSON))
def test_json_the_journal_cannot_hold_is_refused_with_a_4xx_and_changes_nothing(hostile_api, operation, case):
    method, path, wrap = BODIES[operation]
    before = snapshot()
    response = send(hostile_api, method, path, wrap(REFUSED_JSON[case]))
    assert_refused(response)
    assert snapshot() == before


@pytest.mark.parametrize("operation", sorted(BODIES))
@pytest.mark.parametrize("body", [
    b'{"a": "\xff\xfe"}', b"\xc3\x28", b"\xed\xa0\x80", b"\x00\x00\x00", b"\xef\xbb\xbf{\"a\": 1", b"\x80" * 1000,
], ids=["invalid-byte", "bad-continuation", "encoded-surrogate", "nul-bytes", "bom-truncated", "garbage"])
def test_bodies_that_are_not_utf8_json_are_400(hostile_api, operation, body):
    method, path, _ = BODIES[operation]
    before = snapshot()
    assert_refused(send(hostile_api, method, path, body), 400)
    assert snapshot() == before


@pytest.mark.parametrize("operation", sorted(BODIES))
def test_a_body_of_1_mib_and_one_byte_is_413_and_one_of_1_mib_is_taken(hostile_api, operation):
    method, path, wrap = BODIES[operation]
    before = snapshot()
    wrapper = len(wrap("").encode())
    # The value itself 1 MiB + 1 byte of JSON: a string of MIB - 1 characters and its quotes.
    too_big = '"' + "x" * (MIB - 1) + '"'
    response = send(hostile_api, method, path, wrap(too_big))
    assert_refused(response, 400 if operation == "status" else 413)
    assert snapshot() == before
    # The whole body over the server's limit as well (1 MiB + 64 KiB of framing allowed).
    response = send(hostile_api, method, path, wrap('"' + "x" * (MIB + 64 * 1024 - wrapper) + '"'))
    assert_refused(response, 413)
    assert snapshot() == before
    if operation in ("event", "create"):
        exactly = '"' + "é" * ((MIB - 2) // 2) + '"'  # 1 MiB of UTF-8 as JSON: limits count bytes
        assert len(exactly.encode()) == MIB
        response = send(hostile_api, method, path, wrap(exactly))
        assert response.status_code in (201, 202), response.content[:300]
        stored = (Event.objects.latest("pk").payload if operation == "event"
                  else Instance.objects.get(instance_id=response.json()["id"]).params)
        # An event payload this large is kept in file storage (LARGE_VALUE_THRESHOLD), read back whole.
        assert large_values.load(stored, lambda: "the event") == json.loads(exactly)


def test_nesting_as_deep_as_the_parser_allows_is_stored_or_refused_never_a_500(hostile_api, workflows_env):
    for depth in (100, 500, 900, 990, 2000, 10_000):
        text = "[" * depth + "]" * depth
        for method, path, wrap in BODIES.values():
            before = snapshot()
            response = send(hostile_api, method, path, wrap(text))
            assert response.status_code < 500, (depth, path, response.status_code)
            if response.status_code >= 400:
                assert_refused(response)
                assert snapshot() == before
    # What was stored can be read back, through the API and the admin (whose indented JSON recursed
    # past Python's limit: a 500).
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    admin = Client()
    admin.force_login(User.objects.get(username="root"))
    deep = workflows.get("approval").create(params=_nested(900))
    workflows_env.run_until_idle()
    assert deep.status()["status"] == "waiting"
    for instance in Instance.objects.all():
        assert hostile_api.get(f"/workflows/{instance.workflow_name}/instances/{instance.instance_id}/"
                               ).status_code == 200
        page = admin.get(reverse("admin:django_workflows_instance_change", args=[instance.pk]))
        assert page.status_code == 200, instance
    assert admin.get(reverse("admin:django_workflows_instance_approvals")).status_code == 200


ROUND_TRIPS = {
    "SQL": SQL,
    "HTML": HTML,
    "huge integers": [2**63, -(2**63) - 1, 10**300, int("9" * 4000)],
    "floats at the edges": [5e-324, -0.0, 0.1, 1.5, 2.5e-300],
    "escapes": "\\u0000 \\ud800 \" \\ \n \t \u2028 \u2029 \ufeff",
    "astral and combining characters": "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 👩‍👩‍👧 é",
    "control characters": "".join(chr(c) for c in range(1, 32)) + "\x7f",
    "keys that look like SQL and HTML": {SQL: HTML, HTML: SQL, "": None},
    "unknown fields inside params": {"colour": "red", "__proto__": {"admin": True}, "constructor": 1},
    "deep but fine": [[[[[[[[[[{"a": [1]}]]]]]]]]]],
    "not an object": [1, "two", None, True],
    "a bare string": "just text",
    "null": None,
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_hostile_but_valid_json_is_stored_and_read_back_exactly(hostile_api, case):
    value = ROUND_TRIPS[case]
    body = json.dumps({"instance_id": "rt-1", "params": value})
    response = send(hostile_api, "POST", CREATE, body)
    assert response.status_code == 201, response.content[:300]
    assert json.loads(response.content)["params"] == value
    assert hostile_api.get(f"{CREATE}rt-1/").json()["params"] == value
    assert Instance.objects.get(instance_id="rt-1").params == value
    response = send(hostile_api, "POST", EVENT, json.dumps(value), HTTP_X_WORKFLOWS_SOURCE=f"{SQL}{HTML}")
    assert response.status_code == 202, response.content[:300]
    event = Event.objects.latest("pk")
    assert event.payload == value
    assert event.sender == "api:root"  # the API records the user; the header is a webhook's
    assert hostile_api.get("/workflows/approval/instances/a1/").json()["events"][-1]["payload"] == value


def test_a_whole_float_written_with_an_exponent_comes_back_as_the_same_number(hostile_api):
    # PostgreSQL's jsonb keeps numbers as decimals and prints 1e300 in full, which JSON reads as an int;
    # the number is the same, the Python type may not be.
    value = [1e300, 1.7976931348623157e308, 1e20]
    response = send(hostile_api, "POST", CREATE, json.dumps({"instance_id": "big", "params": value}))
    assert response.status_code == 201
    stored = Instance.objects.get(instance_id="big").params
    assert [float(number) for number in stored] == value


LONG_101, LONG_10K = "i" * 101, "i" * 10_000
HOSTILE_TEXT = [SQL, HTML, LONG_101, LONG_10K, "a b", "a/b", "a\nb", "a\n", " a", "-a", "é", "a\x00b", "a%00b",
                "..", "a\u202eb", "😀"]


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_hostile_ids_event_types_and_names_in_the_path_are_4xx_and_change_nothing(hostile_api, text):
    from urllib.parse import quote

    quoted = quote(text, safe="")
    before = snapshot()
    for method, path, body in [
        ("GET", f"/workflows/approval/instances/{quoted}/", None),
        ("PATCH", f"/workflows/approval/instances/{quoted}/status/", '{"status": "pause"}'),
        ("POST", f"/workflows/approval/instances/{quoted}/events/manager-approval/", "{}"),
        ("POST", f"/workflows/approval/instances/a1/events/{quoted}/", "{}"),
        ("GET", f"/workflows/{quoted}/", None),
        ("GET", f"/workflows/{quoted}/instances/", None),
        ("POST", f"/workflows/{quoted}/instances/", "{}"),
        ("POST", f"/workflows/{quoted}/instances/batch/", "[{}]"),
        ("POST", f"/workflows/{quoted}/instances/a1/events/go/", "{}"),
    ]:
        response = send(hostile_api, method, path, body)
        assert_refused(response)
    assert snapshot() == before


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=range(len(HOSTILE_TEXT)))
def test_hostile_ids_and_statuses_in_the_body_are_400_and_change_nothing(hostile_api, text):
    before = snapshot()
    for method, path, body in [
        ("POST", CREATE, {"instance_id": text}),
        ("POST", BATCH, [{"instance_id": text}]),
        ("POST", BATCH, [{"instance_id": "fine"}, {"instance_id": text}]),
        ("PATCH", STATUS, {"status": text}),
    ]:
        assert_refused(send(hostile_api, method, path, json.dumps(body)), 400)
    assert snapshot() == before


@pytest.mark.parametrize("body", [
    {"instance_id": 7}, {"instance_id": True}, {"instance_id": None}, {"instance_id": ["a"]}, {"instance_id": {}},
    {"instance_id": "x", "colour": "red"}, {"params": {}, "instance_id": "x", "id": "y"}, "a string", 7, None, [],
], ids=lambda body: json.dumps(body)[:30])
def test_wrong_types_and_unknown_fields_on_create_are_400(hostile_api, body):
    before = snapshot()
    assert_refused(send(hostile_api, "POST", CREATE, json.dumps(body)), 400)
    assert_refused(send(hostile_api, "POST", BATCH, json.dumps([body])), 400)
    assert snapshot() == before


@pytest.mark.parametrize("body", [
    {"status": "pause", "colour": "red"}, {"status": ["pause"]}, {"status": None}, {"status": 1}, {}, [], "pause",
    None,
], ids=lambda body: json.dumps(body)[:30])
def test_wrong_types_and_unknown_fields_on_status_are_400(hostile_api, body):
    before = snapshot()
    assert_refused(send(hostile_api, "PATCH", STATUS, json.dumps(body)), 400)
    assert snapshot() == before


@pytest.mark.parametrize("query", [
    f"status={SQL}", f"status={HTML}", "status=", "status=queued%00", f"page={SQL}", "page=-1", "page=0",
    "page=1e3", "page=²", "page=" + "9" * 30, "page=999999", "per_page=0", "per_page=-5", "per_page=abc",
    "per_page=" + "9" * 30, "per_page=1001", f"per_page={HTML}", "page=last",
])
def test_hostile_query_parameters_are_4xx(hostile_api, query):
    from urllib.parse import quote

    name, _, value = query.partition("=")
    response = hostile_api.get(f"/workflows/approval/instances/?{name}={quote(value, safe='%')}")
    assert_refused(response)


def test_harmless_query_parameters_are_ignored_or_honoured(hostile_api):
    for query in ("page=1", "per_page=1000", "per_page=1", f"unknown={SQL}", "status=waiting&status=queued"):
        response = hostile_api.get(f"/workflows/approval/instances/?{query}")
        assert response.status_code == 200, (query, response.content[:300])


def test_methods_the_api_does_not_have_are_405(hostile_api):
    before = snapshot()
    for method, path in [("DELETE", "/workflows/approval/instances/a1/"), ("PUT", STATUS),
                         ("GET", "/workflows/approval/instances/batch/"), ("DELETE", "/workflows/"),
                         ("GET", EVENT), ("POST", "/workflows/approval/instances/a1/")]:
        assert_refused(send(hostile_api, method, path, "{}"), 405)
    assert snapshot() == before


@pytest.mark.parametrize("authorization", [
    f"Token {SQL}", f"Token {HTML}", "Token " + "a" * 10_000, "Basic !!!", "Basic " + "QQ==" * 5000,
    "Bearer x", "Token", "Token a b", "Basic cm9vdDpwdw==\x00",
])
def test_hostile_credentials_are_401(db, authorization):
    from rest_framework.test import APIClient

    response = APIClient().get("/workflows/", HTTP_AUTHORIZATION=authorization)
    assert response.status_code == 401, response.content[:200]
    assert json.loads(response.content)["error"]["code"] in ("authentication_failed", "not_authenticated")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          "application/xml", "", "application/json-seq"])
def test_bodies_that_are_not_json_are_415(hostile_api, content_type):
    before = snapshot()
    for method, path, wrap in BODIES.values():
        response = send(hostile_api, method, path, wrap('"x"'), content_type=content_type)
        assert_refused(response, 415)
    assert snapshot() == before


# Step results and errors that cannot be journaled.

def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def _circular():
    value = []
    value.append(value)
    return value


UNSTORABLE_RESULTS = {
    "an object": (object, "not JSON-serializable"),
    "a generator": (lambda: (n for n in range(3)), "not JSON-serializable"),
    # Typed values (a Decimal, a datetime, a set, bytes: docs/guide/typed-values.md) are stored; what
    # the tagged form has no type for is still refused, wherever it sits in the value.
    "a lock in a set": (lambda: {1, threading.Lock()}, "not JSON-serializable (it holds a _thread.lock)"),
    "an unsaved model instance": (lambda: User(username="x"), "an unsaved User; save it first"),
    "infinity": (lambda: [float("inf")], "not JSON-serializable"),
    "a circular list": (_circular, "not JSON-serializable"),
    "nesting 100,000 deep": (lambda: _nested(100_000), "nested too deeply"),
    "a NUL character": (lambda: {"text": "a\x00b"}, "U+0000"),
    "a lone surrogate": (lambda: ["\ud800"], "lone surrogate"),
    "1 MiB and one byte": (lambda: "x" * (MIB - 1), "1048577 bytes as JSON, over the limit of 1048576"),
}


class ReturnsTheUnstorable(WorkflowEntrypoint):
    def run(self, event, step):
        make, _ = UNSTORABLE_RESULTS[event.payload["case"]]
        try:
            step.do("unstorable", make)
        except Exception as exc:
            caught = f"{type(exc).__name__}: {exc}"
        return step.do("after", lambda: caught)


@pytest.mark.parametrize("case", sorted(UNSTORABLE_RESULTS))
def test_a_step_result_that_cannot_be_journaled_is_a_step_result_error_naming_the_step(workflows_env, case):
    instance = workflows.get("returns-the-unstorable").create(params={"case": case})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "complete", status
    # Raised inside run(), where it can be caught, and journaled: not retried, not a crash.
    assert status["output"].startswith("StepResultError: Step 'unstorable' returned a value that ")
    assert UNSTORABLE_RESULTS[case][1] in status["output"]
    step = Step.objects.get(instance_id=instance.pk, name="unstorable")
    assert step.status == "failed" and len(step.attempts) == 1 and step.error["name"] == "StepResultError"


def test_a_dict_with_int_keys_reads_the_same_on_the_first_run_and_on_replays(workflows_env):
    class IntKeys(WorkflowEntrypoint):
        def run(self, event, step):
            got = step.do("ints", lambda: {1: "one", 2: ["two"]})
            step.sleep("nap", "1 second")
            return got

    try:
        instance = workflows.get("int-keys").create()
        workflows_env.run_until_idle()
        workflows_env.advance("1 second")
        # Journaled tagged as a dict with keys other than strings, read back with its int keys.
        assert instance.status()["output"] == {1: "one", 2: ["two"]}
    finally:
        registry.unregister(IntKeys)


UNPRINTABLE_MESSAGES = {"nul": "a\x00b", "surrogate": "\ud800", "html": "<script>alert(1)</script>",
                        "100k": "x" * 100_000}


class RaisesTheUnprintable(WorkflowEntrypoint):
    """Error messages are the workflow's text too: NUL and lone surrogates must not break the journal."""

    def run(self, event, step):
        message = UNPRINTABLE_MESSAGES[event.payload["case"]]

        def fail():
            raise ValueError(message)

        try:
            step.do("fails", fail, config={"retries": {"limit": 0}})
        except ValueError:
            pass
        raise RuntimeError(message)


@pytest.mark.parametrize("case", sorted(UNPRINTABLE_MESSAGES))
def test_error_messages_the_database_cannot_hold_still_error_the_instance(workflows_env, case):
    instance = workflows.get("raises-the-unprintable").create(params={"case": case})
    workflows_env.run_until_idle()
    status = instance.status()
    assert status["status"] == "errored", status
    assert status["error"]["name"] == "RuntimeError"
    step = Step.objects.get(instance_id=instance.pk)
    assert step.status == "failed" and step.error["name"] == "ValueError"


@pytest.mark.parametrize("case", ["nested 100,000 deep", "NaN", "NUL in a string", "a lone surrogate",
                                  "a truncated document", "not UTF-8", "1 MiB and one byte"])
def test_a_signed_webhook_body_that_cannot_be_stored_is_refused(hostile_api, settings, case):
    from rest_framework.test import APIClient

    from django_workflows.webhooks import sign

    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": "whsec"}}
    body = {"not UTF-8": b'{"a": "\xff"}', "1 MiB and one byte": ('"' + "x" * (MIB - 1) + '"').encode()}.get(
        case) or REFUSED_JSON[case].encode()
    before = snapshot()
    response = APIClient().post("/workflows/approval/instances/a1/webhooks/manager-approval/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign("whsec", body),
                                HTTP_X_WORKFLOWS_SOURCE=SQL + HTML)
    assert_refused(response, 413 if case.startswith("1 MiB") else 400)
    assert snapshot() == before


def test_sql_and_html_in_a_webhooks_source_are_kept_as_text(hostile_api, settings):
    from rest_framework.test import APIClient

    from django_workflows.webhooks import sign

    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": "whsec"}}
    body = json.dumps({"sql": SQL, "html": HTML}).encode()
    response = APIClient().post("/workflows/approval/instances/a1/webhooks/manager-approval/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign("whsec", body),
                                HTTP_X_WORKFLOWS_SOURCE=SQL)
    assert response.status_code == 202
    event = Event.objects.get()
    assert event.sender == f"webhook:{SQL}@127.0.0.1" and event.payload == {"sql": SQL, "html": HTML}
    assert Instance.objects.count() == 1  # the table is still there
