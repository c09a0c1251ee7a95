"""A new user's first hour: a fresh ``startproject`` given exactly the README's install lines works.

The project is made by ``django-admin startproject``; its settings and URLs get the Python blocks of
the README's "Install" section as written (the blocks that start ``# settings.py`` and ``# urls.py``,
which docs/install.md repeats word for word), and its one app the README's workflow ("A workflow"),
with fakes for the payment provider it calls. Everything then runs as the user would run it, in real
processes: ``check`` says nothing, ``workflows trigger`` prints the id, ``workflows_worker`` runs the
instance on the ORM broker of the project's own SQLite file, a user given permissions by the block of
docs/install.md that starts ``# python manage.py shell`` and a token made by ``drf_create_token`` sends
the approval through ``runserver`` with that page's ``curl``, and the instance completes. A broker
whose package is missing is then refused in one line, and nothing is created.

The tutorial (docs/tutorial.md) is run as written by test_tutorial.py, in a new virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.workers import stop_process_group

# CI's Django 6 pass runs this file: the running Django's startproject makes the project, which migrates
# and serves with it.
pytestmark = [pytest.mark.django_version, pytest.mark.own_project]

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"
INSTALL_PAGE = REPOSITORY / "docs" / "install.md"

# The outside services the README's example calls: a payment provider cannot exist here.
FAKE_SERVICES = '''
def validate_payment(payload):
    return {"amount": payload["amount"], "currency": "EUR"}


def ask_manager(payment, instance_id):
    return {"asked": instance_id}


def charge(payment):
    return {"charged": payment["amount"]}

'''


def readme_section(title: str, page: Path = README) -> str:
    text = page.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end] if end != -1 else text[start:]


def code_blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def block_for(section: str, first_line: str) -> str:
    (block,) = [b for b in code_blocks(section, "python") if b.startswith(first_line + "\n")]
    return block


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Project:
    def __init__(self, root: Path):
        self.root = root
        # The user's shell: none of the test suite's settings or databases.
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("DJANGO_", "DATABASE_URL", "TEST_", "PYTEST"))}

    def manage(self, *args: str, check: bool = True, prelude: str = "", settings: str | None = None):
        command = [sys.executable]
        if prelude:
            # Runs in the manage.py process before Django starts (used to make a package unimportable).
            command += ["-c", f"{prelude}\nimport runpy, sys\nsys.argv = ['manage.py', *sys.argv[1:]]\n"
                              "runpy.run_path('manage.py', run_name='__main__')"]
        else:
            command += ["manage.py"]
        command += list(args)
        env = {**self.env, "DJANGO_SETTINGS_MODULE": settings} if settings else self.env
        result = subprocess.run(command, cwd=self.root, env=env, capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, f"{args}: {result.stdout}{result.stderr}"
        return result

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=self.root, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def status(self, instance_id: str) -> dict:
        out = self.manage("workflows", "instances", "describe", "payment-approval", instance_id, "--json").stdout
        return json.loads(out)

    def wait_for(self, instance_id: str, status: str, seconds: float = 90) -> dict:
        deadline = time.monotonic() + seconds
        while True:
            described = self.status(instance_id)
            if described["status"] == status or time.monotonic() > deadline:
                return described
            time.sleep(0.5)


def stop(process: subprocess.Popen) -> str:
    return stop_process_group(process)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    root = tmp_path_factory.mktemp("fresh")
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(root)], check=True)
    fresh = Project(root)
    fresh.manage("startapp", "billing")
    section = readme_section("Install")
    settings = root / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + block_for(section, "# settings.py")
                        + '\nINSTALLED_APPS += ["billing"]  # the project\'s own app, with its workflows.py\n')
    urls = root / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + "\n" + block_for(section, "# urls.py"))
    (example,) = code_blocks(readme_section("A workflow"), "python")
    imports, _, body = example.partition("\n\n")
    (root / "billing" / "workflows.py").write_text(imports + "\n" + FAKE_SERVICES + body)
    return fresh


def test_the_install_page_repeats_the_readme_settings_word_for_word():
    readme, page = readme_section("Install"), INSTALL_PAGE.read_text()
    for first_line in ("# settings.py", "# urls.py"):
        assert f"```python\n{block_for(readme, first_line)}```" in page, first_line


def test_the_readme_install_section_gives_a_working_project(project):
    section = readme_section("Who may do what", INSTALL_PAGE)
    migrate = project.manage("migrate", "-v", "0")
    assert migrate.stdout + migrate.stderr == ""  # no warning from django-q2 or the checks

    check = project.manage("check")
    assert check.stdout == "System check identified no issues (0 silenced).\n"
    assert check.stderr == ""
    durability = project.manage("shell", "-c", "from django.db import connection\n"
                                "with connection.cursor() as c:\n"
                                "    c.execute('PRAGMA journal_mode'); mode = c.fetchone()[0]\n"
                                "    c.execute('PRAGMA synchronous'); print(mode, c.fetchone()[0])")
    assert durability.stdout.split()[-2:] == ["wal", "2"]  # 2: FULL, nothing acknowledged is lost

    trigger = project.manage("workflows", "trigger", "payment-approval", '{"amount": 120}')
    instance_id = trigger.stdout.strip()
    assert str(uuid.UUID(instance_id)) == instance_id and trigger.stderr == ""
    assert project.status(instance_id)["status"] == "queued"

    worker = project.start("workflows_worker", "--workers", "1")
    port = free_port()
    server = project.start("runserver", f"127.0.0.1:{port}", "--noreload")
    try:
        waiting = project.wait_for(instance_id, "waiting")
        assert waiting["status"] == "waiting", waiting

        # The install page's permissions snippet, then a token for the user it made.
        shell = project.manage("shell", "-c", block_for(section, "# python manage.py shell"))
        assert "Traceback" not in shell.stderr
        made = project.manage("drf_create_token", "alice").stdout
        token = re.search(r"token (\w+) for user alice", made).group(1)

        # The install page's curl, pointed at this instance and this server.
        (shell_block,) = [b for b in code_blocks(section, "sh") if "curl " in b]
        curl = shell_block[shell_block.index("curl "):].replace("\\\n", " ")
        curl = (curl.replace("<token>", token).replace("<id>", instance_id)
                .replace("127.0.0.1:8000", f"127.0.0.1:{port}"))
        _wait_for_port(port)
        sent = subprocess.run(shlex.split(curl) + ["-s", "-o", "/dev/stderr", "-w", "%{http_code}"],
                              capture_output=True, text=True, timeout=30)
        assert sent.stdout == "202", sent.stderr

        done = project.wait_for(instance_id, "complete")
        assert done["status"] == "complete", done
        assert done["output"] == {"charged": 120}
        assert [event["sender"] for event in done["events"]] == ["api:alice"]

        # The API's schema, titled and versioned, and a page that shows it.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/workflows/schema/ui/", timeout=10) as page:
            assert "<title>django-workflows API" in page.read().decode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/workflows/schema/",
                                         headers={"Accept": "application/vnd.oai.openapi+json",
                                                  "Authorization": f"Token {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            info = json.loads(response.read())["info"]
        assert info["title"] == "django-workflows API" and info["version"] != "0.0.0"
    finally:
        server_log = stop(server)
        worker_log = stop(worker)
    assert "Traceback" not in worker_log, worker_log
    assert "Traceback" not in server_log, server_log


def test_a_broker_whose_package_is_missing_is_one_line_and_creates_nothing(project):
    (project.root / "mysite" / "settings_redis.py").write_text(
        'from .settings import *  # noqa\n\n'
        'Q_CLUSTER = {"name": "site", "redis": {"host": "127.0.0.1"}, "timeout": 900, "retry": 960,\n'
        '             "ack_failures": True, "save_limit": -1, "queue_limit": 8}\n'
    )
    without_redis = "import sys; sys.modules['redis'] = None  # as if redis were not installed"
    before = json.loads(project.manage("workflows", "list", "--json").stdout)

    check = project.manage("check", check=False, prelude=without_redis, settings="mysite.settings_redis")
    assert check.returncode == 1
    assert "(django_workflows.E009)" in check.stderr
    assert "Q_CLUSTER's broker needs the 'redis' package, which is not installed" in check.stderr
    assert "Traceback" not in check.stderr

    for command in (["workflows", "trigger", "payment-approval", '{"amount": 5}'],
                    ["workflows", "--skip-checks", "trigger", "payment-approval", '{"amount": 5}']):
        trigger = project.manage(*command, check=False, prelude=without_redis, settings="mysite.settings_redis")
        assert trigger.returncode == 1 and trigger.stdout == ""
        assert "Traceback" not in trigger.stderr
        assert "needs the 'redis' package" in trigger.stderr
    assert trigger.stderr.strip().count("\n") == 0, trigger.stderr  # past the checks, one line

    worker = project.manage("workflows_worker", check=False, prelude=without_redis,
                            settings="mysite.settings_redis")
    assert worker.returncode == 1 and "needs the 'redis' package" in worker.stderr
    assert json.loads(project.manage("workflows", "list", "--json").stdout) == before


def _wait_for_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"runserver did not listen on port {port}")


def test_django_q_listed_first_still_gets_the_default_and_a_check_says_to_reorder(project):
    (project.root / "mysite" / "settings_q_first.py").write_text(
        "from .settings import *  # noqa\n\n"
        "INSTALLED_APPS.remove('django_q')\n"
        "INSTALLED_APPS.insert(INSTALLED_APPS.index('django_workflows'), 'django_q')\n"
    )
    check = project.manage("check", check=False, settings="mysite.settings_q_first")
    assert "(django_workflows.W110) django_q is listed before django_workflows" in check.stdout + check.stderr
    conf = project.manage("shell", "-c", "from django_q.conf import Conf; "
                          "print(Conf.ORM, Conf.BROKER_CLASS, Conf.TIMEOUT, Conf.RETRY, Conf.ACK_FAILURES)",
                          settings="mysite.settings_q_first")
    assert conf.stdout.split()[-5:] == ["default", "django_workflows.executors.broker.ORMBroker", "900", "960", "True"]
