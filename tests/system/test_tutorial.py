"""The tutorial (docs/tutorial.md), done as a new user would do it, from a copy of the repository.

Every code block of the tutorial is executed, except ``text`` blocks, which picture the directories.
``console`` blocks are typed into a shell, one ``$ `` line at a time: ``cd`` and ``source
.venv/bin/activate`` change the shell's directory and PATH, the long-running commands
(``workflows_worker``, ``runserver``) start in a terminal of their own, every other command must exit
0. ``python`` blocks carry the file they belong in as their title (```` ```python
title="expenses/workflows.py" ````): a file that exists (``startproject`` made it) gets the block added
to its end, as the tutorial says, any other is created. A block of another kind, or a python block
without a title, fails the test: nothing in the tutorial goes unexecuted.

The files ``startapp`` made (``expenses/models.py``, ``expenses/admin.py``) hold only their import, so a
block added after it is the same as the file the tutorial shows.

The directory starts with the repository's tracked files copied into ``django-workflows/`` (what a
clone holds, with this working tree's changes), and a new virtualenv is made beside it by the tutorial's
own ``python3 -m venv``: no package of the test suite's is visible. The Approve click is the admin's
own form, posted to ``runserver`` by a logged-in session: the login page, the *Waiting for approval*
page and its form for ``expense-1``, as the tutorial says to click through them. Then Chromium, logged
in as the tutorial's administrator, opens the expense from the admin's home page as the tutorial says,
and finds it paid, with its instance listed by ``WorkflowInstancesInline`` and linked to its timeline.
"""

from __future__ import annotations

import html
import http.cookiejar
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.system.test_admin_browser import CHROMIUM_ARGS, SCREENSHOTS, chromium  # noqa: F401  (the fixture)
from tests.workers import as_a_terminal_starts_it, stop_process_group

# It makes a project of its own, on SQLite, whatever the suite's database.
pytestmark = pytest.mark.own_project

REPOSITORY = Path(__file__).resolve().parents[2]
TUTORIAL = REPOSITORY / "docs" / "tutorial.md"
LONG_RUNNING = ("workflows_worker", "runserver")

FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.S | re.M)


def tutorial_blocks() -> list[tuple[str, str | None, str]]:
    """The tutorial's code blocks in order: (language, title, body)."""
    blocks = []
    for match in FENCE.finditer(TUTORIAL.read_text()):
        language, _, attributes = match["info"].partition(" ")
        title = re.search(r'title="([^"]+)"', attributes)
        blocks.append((language, title and title[1], match["body"]))
    return blocks


def commands_of(console: str) -> list[tuple[str, list[str]]]:
    """A console block's commands (the ``$ `` lines), each with the lines the tutorial shows it print."""
    commands: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif line.strip():
            commands[-1][1].append(line)
    return commands


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def copy_of_the_repository(target: Path) -> None:
    """What a clone holds: the tracked files, as they are in this working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPOSITORY, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPOSITORY / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


class Shell:
    """A terminal: a working directory and an environment that ``cd`` and ``source`` change."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        # A new user's environment: none of the test suite's settings, databases or virtualenv.
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("DJANGO_", "DATABASE_URL", "TEST_", "PYTEST", "VIRTUAL_ENV"))}
        suite_bin = str(Path(sys.executable).parent)
        self.env["PATH"] = os.pathsep.join(p for p in self.env["PATH"].split(os.pathsep) if p != suite_bin)
        self.log: list[str] = []
        self.started: list[tuple[str, subprocess.Popen]] = []

    def type(self, line: str, port: int) -> None:
        words = shlex.split(line)
        if words[0] == "cd":
            self.cwd = (self.cwd / words[1]).resolve()
            return
        if words[0] == "source":
            venv = (self.cwd / words[1]).resolve().parents[1]
            self.env["VIRTUAL_ENV"] = str(venv)
            self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env['PATH']}"
            return
        if any(command in words for command in LONG_RUNNING):
            if "runserver" in words:  # the tutorial's port 8000 may be taken on this machine
                line = f"{line} 127.0.0.1:{port} --noreload"
            process = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=self.cwd, env=self.env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       start_new_session=True, preexec_fn=as_a_terminal_starts_it)
            self.started.append((line, process))
            return
        result = subprocess.run(["bash", "-c", line], cwd=self.cwd, env=self.env, capture_output=True,
                                text=True, timeout=600)
        self.log.append(f"$ {line}\n{result.stdout}{result.stderr}")
        assert result.returncode == 0, "\n".join(self.log)

    def last_output(self) -> str:
        return self.log[-1]

    def stop_all(self) -> dict[str, str]:
        outputs = {}
        for line, process in self.started:
            outputs[line] = stop_process_group(process, signal.SIGINT)  # Ctrl+C, as the tutorial ends
        return outputs


class Browser:
    """The admin as a person uses it: a session cookie, forms posted with their CSRF token."""

    def __init__(self, base: str):
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=30) as response:
            return response.read().decode()

    def post(self, path: str, fields: dict, referer: str) -> str:
        request = urllib.request.Request(self.base + path, data=urllib.parse.urlencode(fields).encode(),
                                         headers={"Referer": self.base + referer})
        with self.opener.open(request, timeout=30) as response:
            return response.read().decode()


def hidden_fields(form: str) -> dict:
    return {html.unescape(name): html.unescape(value)
            for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form)}


def wait_until(predicate, seconds: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.5)


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_every_block_of_the_tutorial_is_one_the_test_can_run():
    blocks = tutorial_blocks()
    assert blocks, TUTORIAL
    for language, title, body in blocks:
        if language == "text":
            continue  # a picture of the directories, not something to run
        assert language in ("console", "python"), f"a ```{language} block the test cannot run:\n{body}"
        if language == "python":
            assert title, f"a python block without the file it belongs in (title=...):\n{body}"
        else:
            assert all(line.startswith("$ ") for line in body.splitlines()[:1]), body


def test_the_tutorial_as_written(tmp_path, chromium):  # noqa: F811
    copy_of_the_repository(tmp_path / "django-workflows")
    shell = Shell(tmp_path)
    port = free_port()
    describe_outputs = []
    try:
        for language, title, body in tutorial_blocks():
            if language == "text":
                continue
            if language == "python":
                target = shell.cwd / title
                if target.exists():
                    target.write_text(target.read_text() + "\n" + body)
                else:
                    target.write_text(body)
                continue
            for command, printed in commands_of(body):
                if "runserver" in command:
                    approve_in_the_admin(shell, command, port)
                    see_the_expense_in_chromium(chromium, port)
                    continue
                shell.type(command, port)
                for line in printed:  # what the tutorial shows the command printing, it prints
                    assert line in shell.last_output().splitlines(), (line, shell.last_output())
                if "workflows_worker" in command:
                    wait_until(lambda project=shell.cwd: status_of(shell, project) == "waiting",
                               what="the wait")
                if "workflows instances describe" in command:
                    describe_outputs.append(shell.last_output())
                if "workflows instances list" in command:  # "It is queued: nothing runs it yet."
                    listed = shell.last_output()
                    assert re.search(r"^expense-1 .*\bqueued\b", listed, re.M), listed
                if "submit()" in command:  # the instance's id, printed as the tutorial shows
                    assert shell.last_output().splitlines()[-1] == "expense-1", shell.last_output()
    finally:
        outputs = shell.stop_all()

    # The describes the tutorial shows: waiting for the decision, then complete with the payment.
    waiting, done = describe_outputs
    assert re.search(r"^Status +waiting$", waiting, re.M), waiting
    assert re.search(r"^Current step +the manager's decision-1$", waiting, re.M), waiting
    assert re.search(r"^Status +complete$", done, re.M), done
    assert '"reference": "PAY-expense-1"' in done, done
    assert re.search(r"^Subject +expenses\.expense:1$", done, re.M), done
    (worker_output,) = [output for line, output in outputs.items() if "workflows_worker" in line]
    assert worker_output.count("Subject: Expense expense-1 to approve: 42.00 EUR") == 1, worker_output
    assert "Traceback" not in worker_output, worker_output
    (server_output,) = [output for line, output in outputs.items() if "runserver" in line]
    assert "Traceback" not in server_output, server_output


def status_of(shell: Shell, project: Path) -> str:
    command = ["python", "manage.py", "workflows", "instances", "describe", "expense-approval", "expense-1",
               "--json"]
    result = subprocess.run(command, cwd=project, env=shell.env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)["status"]


def approve_in_the_admin(shell: Shell, command: str, port: int) -> None:
    """Start runserver, then log in and click Approve on the *Waiting for approval* page."""
    shell.type(command, port)
    wait_until(lambda: listening(port), seconds=30, what="runserver")
    browser = Browser(f"http://127.0.0.1:{port}")

    login = browser.get("/admin/login/?next=/admin/")
    username, password = tutorial_login()
    browser.post("/admin/login/?next=/admin/",
                 {**hidden_fields(login), "username": username, "password": password}, "/admin/login/")

    instances = browser.get("/admin/django_workflows/instance/")
    assert "expense-1" in instances
    link = re.search(r'<a href="([^"]+)">Waiting for approval \(1\)</a>', instances)
    assert link, "no link to Waiting for approval (1) above the instance list"
    queue_path = html.unescape(link[1])
    queue = browser.get(queue_path)
    decision_form = r'<form method="post" action="([^"]+)" class="dw-decision-form">(.*?)</form>'
    (form,) = re.findall(decision_form, queue, re.S)
    action, inside = form
    assert "Approve" in inside
    page = browser.post(html.unescape(action), {**hidden_fields(inside), "comment": "Within budget.",
                                               "outcome": "approved"}, queue_path)
    assert "Approved: event &#x27;manager-decision&#x27; sent" in page or \
        "Approved: event 'manager-decision' sent" in page, page

    project = shell.cwd
    wait_until(lambda: status_of(shell, project) == "complete", what="the instance to complete")


def tutorial_login() -> tuple[str, str]:
    return re.search(r"log in as `(\w+)`, password `(\w+)`", TUTORIAL.read_text()).groups()


def see_the_expense_in_chromium(chromium: str, port: int) -> None:
    """Once the instance is complete: the expense's page, reached from the admin's home page, shows it
    paid and lists its instance, complete, with a link that leads to the instance's timeline."""
    from playwright.sync_api import expect, sync_playwright

    base = f"http://127.0.0.1:{port}"
    username, password = tutorial_login()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/admin/login/?next=/admin/")
            page.fill("#id_username", username)
            page.fill("#id_password", password)
            page.click("input[type=submit]")
            page.locator("tr.model-expense th a", has_text="Expenses").click()
            page.locator("#result_list a", has_text="Train to Lyon").click()
            expect(page).to_have_url(f"{base}/admin/expenses/expense/1/change/")
            expect(page.locator("#id_status")).to_have_value("paid")
            expect(page.locator("#id_payment_reference")).to_have_value("PAY-expense-1")

            inline = page.locator(".inline-group", has_text="Workflow instances")
            (row,) = inline.locator("tbody tr", has=page.locator("td.field-instance")).all()
            expect(row.locator("td.field-workflow_name")).to_have_text("expense-approval")
            expect(row.locator("td.field-status_shown")).to_have_text("Complete")
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=SCREENSHOTS / "tutorial-expense.png", full_page=True)

            row.locator("td.field-instance a", has_text="expense-1").click()
            expect(page).to_have_url(re.compile(rf"^{base}/admin/django_workflows/instance/\d+/change/$"))
            expect(page.locator("#content")).to_contain_text("expense-1")
            expect(page.locator("svg.dw-timeline")).to_be_visible()
        finally:
            browser.close()
