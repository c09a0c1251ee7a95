"""An instance's stream of server-sent events in Chromium: a page logged in to the admin follows an instance
with EventSource, sees its progress and status as they change (the instance moved on by an event sent from
another thread while the page listens), and sees the stream end with the instance."""

import threading

from django.contrib.auth.models import User
from django.db import connection

from django_workflows import workflows
from tests.system.test_admin_browser import CHROMIUM_ARGS, chromium  # noqa: F401  (the fixture)

PASSWORD = "a-long-test-password"

FOLLOW = """url => {
    window.received = [];
    window.source = new EventSource(url);
    for (const kind of ["progress", "status"]) {
        window.source.addEventListener(kind, event => {
            window.received.push([kind, JSON.parse(event.data), event.lastEventId]);
            const data = JSON.parse(event.data);
            if (kind === "status" && ["complete", "errored", "terminated"].includes(data.status)) {
                window.source.close();
            }
        });
    }
}"""


def test_a_page_follows_an_instances_progress_until_it_ends(live_server, chromium, settings,  # noqa: F811
                                                            transactional_db):
    from playwright.sync_api import sync_playwright

    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}
    User.objects.create_superuser("watcher", "watcher@example.com", PASSWORD)
    instance = workflows.get("reporting").create(id="import-7", params={"parts": 2, "wait": True})
    assert instance.status()["status"] == "waiting"

    def go():
        try:
            instance.send_event(type="go")
        finally:
            connection.close()

    # Playwright's sync API keeps an event loop in this thread, where Django refuses database calls: the
    # event is sent from a thread of its own while the page listens.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "watcher")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"{live_server.url}/admin/")
            page.evaluate(FOLLOW, "/workflows/reporting/instances/import-7/stream/")
            page.wait_for_function("window.received.length >= 2", timeout=15_000)
            first = page.evaluate("window.received")
            sender = threading.Thread(target=go)
            sender.start()
            sender.join()
            page.wait_for_function("window.source.readyState === 2", timeout=15_000)  # closed on the end
            received = page.evaluate("window.received")
        finally:
            browser.close()
    assert [(kind, data.get("value", data.get("status"))) for kind, data, _ in first] == [
        ("progress", {"done": 1, "total": 2}), ("status", "waiting")]
    # The replay may be seen running in between (on PostgreSQL its progress wakes the stream at once).
    shown = [(kind, data.get("value", data.get("status"))) for kind, data, _ in received]
    assert [item for item in shown if item not in (("status", "queued"), ("status", "running"))] == [
        ("progress", {"done": 1, "total": 2}), ("status", "waiting"),
        ("progress", {"done": 2, "total": 2}), ("status", "complete")]
    assert received[-1][1]["output"] == {"parts": 2}
    progress_ids = [int(event_id) for kind, _, event_id in received if kind == "progress"]
    assert progress_ids == sorted(progress_ids) and len(set(progress_ids)) == 2  # each its journal row's id
    assert instance.status()["status"] == "complete"
