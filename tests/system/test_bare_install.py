"""The package without its extras: in a new virtualenv holding only what ``pip install`` of the bare
package brings (Django and jsonschema), a project migrates, runs a workflow through a durable sleep,
imports the admin, and is told which extra to install for the API, the django-q2 executor and the
worker's cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# It makes a project of its own, on SQLite, whatever the suite's database.
pytestmark = pytest.mark.own_project

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = """
SECRET_KEY = "bare"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.sessions",
                  "django.contrib.messages", "django.contrib.admin", "django_workflows", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3",
    "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"}}}
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware",
              "django.contrib.messages.middleware.MessageMiddleware"]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
              "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                 "django.contrib.auth.context_processors.auth",
                                                 "django.contrib.messages.context_processors.messages"]}}]
DJANGO_WORKFLOWS = {"EXECUTOR": EXECUTOR}
"""

WORKFLOW = """
from django_workflows import WorkflowEntrypoint


class Order(WorkflowEntrypoint):
    name = "order"

    def run(self, event, step):
        reserved = step.do("reserve", lambda: {"sku": event.payload["sku"]})
        step.sleep("settle", "1 second")
        return step.do("ship", lambda: {"shipped": reserved["sku"]})
"""

SCRIPT = """
import json, time

import django

django.setup()
from django.core.management import call_command

from django_workflows import workflows
from django_workflows.executors import get_executor

call_command("migrate", verbosity=0)
order = workflows.get("order").create(id="o-1", params={"sku": "tea"})
waited = order.status()["status"]
time.sleep(1.2)
get_executor().run_due()
import django_workflows.admin  # noqa: F401  (the admin needs no extra)

print(json.dumps({"waited": waited, **order.status()}))
"""

# A workflow with cron schedules, without the [cron] extra: the system check says which extra to install.
SCHEDULED = """
import json

import django

django.setup()
from django_workflows import WorkflowEntrypoint
from django_workflows.surfaces import checks

type("Nightly", (WorkflowEntrypoint,), {"schedules": ["0 3 * * *"], "run": lambda self, event, step: None})
messages = [m for m in checks.check_workflows() if m.id.startswith("django_workflows.E02")]
print(messages[0].msg if messages else "")
print(json.dumps([m.id for m in messages]))
"""


def run(python: Path, cwd: Path, *args: str, executor: str = "django_workflows.executors.inline.InlineExecutor"):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "DATABASE_URL", "PYTHONPATH"))}
    env.update(DJANGO_SETTINGS_MODULE="settings", PYTHONPATH=str(cwd), TEST_EXECUTOR=executor)
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_package_without_extras_runs_workflows_and_names_the_extra_each_part_needs(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                str(ROOT)], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    probe = run(python, tmp_path, "-c", "import importlib.util as u, json; print(json.dumps("
                "[m for m in ('rest_framework', 'drf_spectacular', 'django_q', 'psycopg', 'redis', 'croniter') "
                "if u.find_spec(m)]))")
    assert json.loads(probe.stdout) == [], "the bare package brought an extra's library"

    project = tmp_path / "project"
    (project / "shop").mkdir(parents=True)
    (project / "shop" / "__init__.py").write_text("")
    (project / "shop" / "workflows.py").write_text(textwrap.dedent(WORKFLOW))
    (project / "settings.py").write_text("import os\nEXECUTOR = os.environ['TEST_EXECUTOR']\n" + SETTINGS)

    ran = run(python, project, "-c", SCRIPT)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == {
        "waited": "waiting", "status": "complete", "output": {"shipped": "tea"}, "error": None}

    checked = run(python, project, "-m", "django", "check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stderr

    api = run(python, project, "-c", "import django; django.setup(); import django_workflows.api.urls")
    assert "pip install 'django-durable-workflows[api]'" in api.stderr
    assert "MissingExtra" in api.stderr

    scheduled = run(python, project, "-c", SCHEDULED)
    assert scheduled.returncode == 0, scheduled.stderr
    assert json.loads(scheduled.stdout.splitlines()[-1]) == ["django_workflows.E024"]
    assert "pip install 'django-durable-workflows[cron]'" in scheduled.stdout

    default_executor = "django_workflows.executors.q2.DjangoQExecutor"
    checked = run(python, project, "-m", "django", "check", executor=default_executor)
    assert checked.returncode != 0
    assert "django_workflows.E009" in checked.stderr
    assert "pip install 'django-durable-workflows[q2]'" in checked.stderr

    worker = run(python, project, "-m", "django", "workflows_worker", "--max-seconds", "1")
    assert worker.returncode == 1
    assert "pip install 'django-durable-workflows[q2]'" in worker.stderr and "--no-cluster" in worker.stderr
    assert "Traceback" not in worker.stderr
