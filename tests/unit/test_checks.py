"""One test per system check id, and one through manage.py check."""

import ast
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_workflows import WorkflowEntrypoint
from django_workflows.surfaces import checks
from django_workflows.shared.definition import registry
from django_workflows.shared.options import WorkflowOptions


def ids(messages):
    return sorted(m.id for m in messages)


def test_the_test_settings_pass_every_check(db):
    assert checks.check_settings() == [] and checks.check_workflows() == [] and checks.check_sqlite() == []
    assert checks.check_unregistered_instances() == []
    call_command("check", "--fail-level", "WARNING")


@override_settings(DJANGO_WORKFLOWS={"STEP_LIMT": 5})
def test_e001_unknown_setting():
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E001" and "STEP_LIMT" in message.msg and "STEP_LIMIT" in message.hint


@override_settings(DJANGO_WORKFLOWS=["STEP_LIMIT", 5])
def test_e011_settings_that_are_not_a_dict():
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E011" and "must be a dict" in message.msg


def test_e002_executor_that_cannot_be_imported():
    with override_settings(DJANGO_WORKFLOWS={"EXECUTOR": "no.such.Executor"}):
        assert ids(checks.check_settings()) == ["django_workflows.E002"]


def test_e015_executor_that_is_not_a_base_executor():
    with override_settings(DJANGO_WORKFLOWS={"EXECUTOR": "django_workflows.foundations.conf.WorkflowSettings"}):
        assert ids(checks.check_settings()) == ["django_workflows.E015"]


@pytest.mark.parametrize("config", [{"retries": {"limit": -1}}, {"timeout": "1 minute"},
                                    {"retries": {"limit": 1, "delay": 10}, "timeout": 5}])
def test_e003_default_step_config(config):
    with override_settings(DJANGO_WORKFLOWS={"DEFAULT_STEP_CONFIG": config}):
        [message] = checks.check_settings()
        assert message.id == "django_workflows.E003" and message.hint


def test_e004_duplicate_names():
    class One(WorkflowEntrypoint):
        name = "dup-name"

        def run(self, event, step):
            pass

    class Two(WorkflowEntrypoint):
        name = "dup-name"

        def run(self, event, step):
            pass

    try:
        [message] = checks.check_workflows()
        assert message.id == "django_workflows.E004" and "One" in message.msg and "Two" in message.msg
    finally:
        registry.unregister(One)
        registry.unregister(Two)


@pytest.mark.parametrize("limit", [0, 25_001, "many"])
def test_e018_step_limit_of_a_workflow(limit):
    cls = type("TooMany", (WorkflowEntrypoint,), {"step_limit": limit, "run": lambda self, e, s: None})
    try:
        assert ids(checks.check_workflows()) == ["django_workflows.E018"]
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize("timeout", [0, "soon", "4000 days", True, [7], -1000])
def test_e037_timeout_of_a_workflow(timeout):
    cls = type("Hasty", (WorkflowEntrypoint,), {"timeout": timeout, "run": lambda self, e, s: None})
    try:
        [message] = checks.check_workflows()
        assert message.id == "django_workflows.E037" and "Hasty.timeout" in message.msg
        assert "no deadline" in message.msg and "7 days" in message.hint
        # Left out, as if not declared: its instances get no deadline.
        assert WorkflowOptions.of(cls).timeout is None
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize("timeout, expected", [("7 days", timedelta(days=7)), (3_600_000, timedelta(hours=1)),
                                               (timedelta(minutes=5), timedelta(minutes=5))])
def test_e037_accepts_any_duration_up_to_ten_years(timeout, expected):
    cls = type("Patient", (WorkflowEntrypoint,), {"timeout": timeout, "run": lambda self, e, s: None})
    try:
        assert checks.check_workflows() == []
        assert WorkflowOptions.of(cls).timeout == expected
    finally:
        registry.unregister(cls)


def test_e005_step_limit_setting():
    with override_settings(DJANGO_WORKFLOWS={"STEP_LIMIT": 30_000}):
        assert ids(checks.check_settings()) == ["django_workflows.E005"]


@pytest.mark.parametrize("limit", [0, 300_001, "6 minutes", "forever", -5, True, [30_000]])
def test_e019_cpu_time_limit_of_a_workflow(limit):
    cls = type("Greedy", (WorkflowEntrypoint,), {"cpu_time_limit": limit, "run": lambda self, e, s: None})
    try:
        [message] = checks.check_workflows()
        assert message.id == "django_workflows.E019" and "Greedy.cpu_time_limit" in message.msg
        assert "5 minutes" in message.hint
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize("limit", [1, 200, 300_000, "5 minutes", "30 seconds", "250 milliseconds", 1.5])
def test_e019_accepts_any_duration_up_to_5_minutes(limit):
    cls = type("Fine", (WorkflowEntrypoint,), {"cpu_time_limit": limit, "run": lambda self, e, s: None})
    try:
        assert checks.check_workflows() == []
        with override_settings(DJANGO_WORKFLOWS={"CPU_TIME_LIMIT": limit}):
            assert checks.check_settings() == []
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize("limit", [0, "10 minutes", "30 secs", None])
def test_e019_cpu_time_limit_setting(limit):
    with override_settings(DJANGO_WORKFLOWS={"CPU_TIME_LIMIT": limit}):
        [message] = checks.check_settings()
    assert message.id == "django_workflows.E019" and "DJANGO_WORKFLOWS['CPU_TIME_LIMIT']" in message.msg
    assert "'30 seconds'" in message.hint


@pytest.mark.parametrize("key", checks.SIZE_SETTINGS)
def test_e006_sizes(key):
    with override_settings(DJANGO_WORKFLOWS={key: 0}):
        assert ids(checks.check_settings()) == ["django_workflows.E006"]


@pytest.mark.parametrize("key", checks.INTERVAL_SETTINGS)
@pytest.mark.parametrize("value", [0, 61, "5", True])
def test_e016_intervals(key, value):
    with override_settings(DJANGO_WORKFLOWS={key: value}):
        assert ids(checks.check_settings()) == ["django_workflows.E016"]


@pytest.mark.parametrize("days", [0, -1, 1.5, "30"])
def test_e017_retention_days(days):
    with override_settings(DJANGO_WORKFLOWS={"RETENTION_DAYS": days}):
        assert ids(checks.check_settings()) == ["django_workflows.E017"]


def test_e007_name():
    cls = type("Nameless", (WorkflowEntrypoint,), {"name": "", "run": lambda self, e, s: None})
    try:
        assert ids(checks.check_workflows()) == ["django_workflows.E007"]
    finally:
        registry.unregister(cls)


def test_e008_no_run():
    cls = type("NoRun", (WorkflowEntrypoint,), {})
    try:
        assert ids(checks.check_workflows()) == ["django_workflows.E008"]
    finally:
        registry.unregister(cls)


@pytest.mark.parametrize("approvals", [{"manager approval"}, 42, ["ok", None], {"-leading-dash"}])
def test_e010_approvals_that_are_not_event_types(approvals):
    cls = type("BadApprovals", (WorkflowEntrypoint,), {"run": lambda self, event, step: None,
                                                       "approvals": approvals})
    try:
        assert ids(checks.check_workflows()) == ["django_workflows.E010"]
    finally:
        registry.unregister(cls)


def test_e010_accepts_one_type_as_a_string_or_a_collection():
    for approvals in ("manager-approval", {"a", "b_2"}, ["x"], ()):
        cls = type("GoodApprovals", (WorkflowEntrypoint,), {"run": lambda self, event, step: None,
                                                            "approvals": approvals})
        try:
            assert ids(checks.check_workflows()) == []
        finally:
            registry.unregister(cls)


def test_w001_sqlite_without_wal():
    [message] = checks.sqlite_messages("default", {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {}})
    assert message.id == "django_workflows.W001"
    assert "transaction_mode" in message.msg and "journal_mode=WAL" in message.msg
    good = {"transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode = WAL;"}
    assert checks.sqlite_messages("default", {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": good}) == []
    assert checks.sqlite_messages("default", {"ENGINE": "django.db.backends.postgresql"}) == []


def test_checks_fail_manage_py_check():
    from django.core.management.base import SystemCheckError

    with override_settings(DJANGO_WORKFLOWS={"BOGUS": 1}), pytest.raises(SystemCheckError, match="E001"):
        call_command("check")


def _tasks_executor(backend: str, queue_name: str = "default") -> dict:
    return {"EXECUTOR": "django_workflows.executors.tasks.TasksExecutor",
            "EXECUTOR_OPTIONS": {"backend": backend, "queue_name": queue_name}}


@pytest.mark.parametrize(("module", "backend"), [("immediate", "ImmediateBackend"), ("dummy", "DummyBackend")])
def test_w201_a_task_backend_that_cannot_run_replays_out_of_process(settings, module, backend):
    from django_workflows.executors.tasks import tasks_framework

    path = f"{tasks_framework().__name__}.backends.{module}.{backend}"
    settings.TASKS = {**settings.TASKS, "in-process": {"BACKEND": path}}
    settings.DJANGO_WORKFLOWS = _tasks_executor("in-process")
    [message] = checks.check_settings()
    assert message.id == "django_workflows.W201" and f"'in-process' ({backend})" in message.msg
    assert "django_tasks_db.DatabaseBackend" in message.hint and "db_worker" in message.hint


def test_the_database_task_backend_passes(settings):
    settings.DJANGO_WORKFLOWS = _tasks_executor("workflows", "workflows")
    assert checks.check_settings() == []


def test_e009_a_task_backend_that_tasks_does_not_define(settings):
    settings.DJANGO_WORKFLOWS = _tasks_executor("nowhere")
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E009" and "'nowhere'" in message.msg


@pytest.mark.backport
def test_e009_the_tasks_framework_missing_on_django_5(settings, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "django_tasks", None)  # as if the backport were not installed
    settings.DJANGO_WORKFLOWS = _tasks_executor("workflows", "workflows")
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E009"
    assert "pip install 'django-durable-workflows[tasks]'" in message.msg


def _celery_executor(**options) -> dict:
    return {"EXECUTOR": "django_workflows.executors.celery.CeleryExecutor",
            "EXECUTOR_OPTIONS": {"app": "tests.celery_app.memory_app", "queue": "workflows", **options}}


def test_the_celery_executor_with_an_app_passes(settings):
    settings.DJANGO_WORKFLOWS = _celery_executor()
    assert checks.check_settings() == []


def test_e009_a_celery_app_that_cannot_be_imported(settings):
    settings.DJANGO_WORKFLOWS = _celery_executor(app="proj.celery.app")
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E009"
    assert "cannot import the Celery app 'proj.celery.app'" in message.msg


def test_e009_celery_not_installed(settings, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "celery", None)  # as if it were not installed
    settings.DJANGO_WORKFLOWS = _celery_executor()
    [message] = checks.check_settings()
    assert message.id == "django_workflows.E009"
    assert "pip install 'django-durable-workflows[celery]'" in message.msg


@pytest.mark.parametrize(("setting", "value", "id_", "said"), [
    ("task_always_eager", True, "W301", "does not follow"),
    ("task_soft_time_limit", 60, "W302", "SoftTimeLimitExceeded"),
])
def test_celery_settings_the_executor_cannot_honour(settings, monkeypatch, setting, value, id_, said):
    from tests.celery_app import memory_app

    monkeypatch.setitem(memory_app.conf, setting, value)
    settings.DJANGO_WORKFLOWS = _celery_executor()
    [message] = checks.check_settings()
    assert message.id == f"django_workflows.{id_}"
    assert "'tests.celery_app.memory_app'" in message.msg and said in message.msg


# The modules that define checks, by dotted path: their source is read, not imported.
CHECK_SOURCES = ["django_workflows.surfaces.checks", "django_workflows.executors.q2", "django_workflows.executors.tasks",
                 "django_workflows.executors.celery"]


def _message_text(node) -> str:
    """A check message's first argument as a template: the literal text, with ``{}`` for each
    interpolated value."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return ast.unparse(node)


def check_ids_in_source(source: str) -> dict[str, set[str]]:
    """Each ``id="django_workflows..."`` in the source's Error and Warning calls, with the message
    templates that use it."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("Error", "Warning", "Critical", "Info", "Debug")):
            continue
        [id_] = [kw.value.value for kw in node.keywords if kw.arg == "id"]
        found.setdefault(id_, set()).add(_message_text(node.args[0]))
    return found


def test_each_check_id_names_one_problem():
    found: dict[str, set[str]] = {}
    for name in CHECK_SOURCES:
        for id_, texts in check_ids_in_source(Path(find_spec(name).origin).read_text()).items():
            assert id_ not in found, f"{id_} is used in more than one module"
            found[id_] = texts
    assert len(found) > 20 and all(id_.startswith("django_workflows.") for id_ in found)
    reused = {id_: sorted(texts) for id_, texts in found.items() if len(texts) > 1}
    assert reused == {}, "each check id must name one problem"


def test_the_id_collector_sees_an_id_reused_for_two_problems():
    source = (
        'Error("A is wrong.", id="django_workflows.E900")\n'
        'Error(f"B is {b}.", id="django_workflows.E900")\n'
        'Error(f"C is {c}.", id="django_workflows.E901")\n'
        'Error(f"C is {d}.", id="django_workflows.E901")\n'
    )
    assert check_ids_in_source(source) == {"django_workflows.E900": {"A is wrong.", "B is {}."},
                                           "django_workflows.E901": {"C is {}."}}
