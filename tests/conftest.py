import django
from django.conf import settings


def pytest_collection_modifyitems(config, items):
    """Tests marked ``postgres`` run only in the PostgreSQL pass; the SQLite pass deselects them, and the
    PostgreSQL pass those marked ``sqlite``.
    Tests marked ``chaos`` take minutes: they run only when ``-m`` names them (``make chaos``).
    Tests marked ``backport`` are about django-tasks, the tasks framework of Django 5.2: Django 6
    deselects them. Tests marked ``own_project`` run a project of their own on SQLite whatever the pass's
    database: the PostgreSQL pass deselects them, as it would only run them again."""
    postgres = "postgresql" in settings.DATABASES["default"]["ENGINE"]
    chaos = "chaos" in (config.getoption("markexpr") or "")
    backport = django.VERSION < (6, 0)

    def wanted(item) -> bool:
        if item.get_closest_marker("postgres") and not postgres:
            return False
        if item.get_closest_marker("sqlite") and postgres:
            return False
        if item.get_closest_marker("backport") and not backport:
            return False
        if item.get_closest_marker("own_project") and postgres:
            return False
        return chaos or not item.get_closest_marker("chaos")

    selected = [item for item in items if wanted(item)]
    deselected = [item for item in items if not wanted(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
    config._workflows_deselected = {
        "need PostgreSQL (they run in the PostgreSQL pass)":
            sum(1 for item in deselected if item.get_closest_marker("postgres") and not postgres),
        "are about SQLite (they run in the SQLite pass)":
            sum(1 for item in deselected if item.get_closest_marker("sqlite") and postgres),
        "are the chaos test (make chaos)":
            sum(1 for item in deselected if item.get_closest_marker("chaos")
                and not (item.get_closest_marker("postgres") and not postgres)),
        "are about the django-tasks backport (Django 5.2 only)":
            sum(1 for item in deselected if item.get_closest_marker("backport")),
        "run a project of their own on SQLite (they run in the SQLite pass)":
            sum(1 for item in deselected if item.get_closest_marker("own_project") and postgres),
    }


def pytest_report_collectionfinish(config, start_path, items):
    """Say why tests were deselected, and why a file's name can come up twice in the progress."""
    reasons = [f"{count} {why}" for why, count in getattr(config, "_workflows_deselected", {}).items() if count]
    lines = [f"deselected: {'; '.join(reasons)}"] if reasons else []
    lines.append("pytest-django runs plain database tests first, then transactional ones, then the rest, "
                 "so a file's name can appear more than once below")
    return lines


import pytest  # noqa: E402


def _empty_tables_by_delete_on_postgresql():
    """After a transactional test Django empties every table with one ``TRUNCATE``, which on PostgreSQL
    gives each of the project's 24 tables and their indexes new files: 200 ms a test, against a
    millisecond or two for a ``DELETE`` of the few rows a test leaves. The foreign keys are
    ``DEFERRABLE INITIALLY DEFERRED`` and checked when the flush commits, by which time every table is
    empty; ``reset_sequences`` (which needs ``RESTART IDENTITY``) keeps Django's ``TRUNCATE``."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
                for table in tables]

    DatabaseOperations.sql_flush = sql_flush


if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
    _empty_tables_by_delete_on_postgresql()


@pytest.fixture
def inline_executor(settings):
    """Replays run inside create(), in the test's thread, once its transaction commits."""
    from django_workflows import executors

    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}
    executors.reset()
    yield
    executors.reset()


@pytest.fixture(autouse=True)
def _reset_calls():
    from tests.testapp.workflows import calls

    calls.clear()
    yield
    calls.clear()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_configure(config):
    """The live server's connections send at once (TCP_NODELAY). Django's development server writes a
    response's headers and its body in two sends; with Nagle's algorithm the body then waits for the
    client's delayed acknowledgement of the headers, 40 ms on Linux, so every request to ``live_server``
    took some 45 ms where it takes 3, and the tests that send thousands (schemathesis, the load test)
    spent most of their minutes idle."""
    import socket

    from django.core.servers.basehttp import ThreadedWSGIServer
    from django.test.testcases import LiveServerThread

    class SendingAtOnce(ThreadedWSGIServer):
        def get_request(self):
            connection, address = super().get_request()
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return connection, address

    LiveServerThread.server_class = SendingAtOnce
