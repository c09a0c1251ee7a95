"""The admin in a real browser: log in, open an approval that waits, approve it, and see it complete.

Runs Chromium headless through Playwright against the live server, with the inline executor so each
replay runs in the server's thread when its change commits. Then the instance page and the workflow's
page again in an 800 px wide window, where each must fit: its drawings and tables scroll inside their
cards, the page itself never sideways; so must the approval queue, whose row leads to the instance.
Screenshots of the list, the instance page with its timeline and the workflow's diagram, at both widths,
and of the queue are saved under var/screenshots/; the list and the instance page show what each instance's
replays cost in CPU time.
"""

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from django_workflows import workflows
from django_workflows.reading.drawing.time_axis import human_milliseconds
from django_workflows.models import Event, Instance

# CI's Django 6 pass runs this file: the admin's templates, forms and scripts are the running Django's.
pytestmark = pytest.mark.django_version

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"
NARROW = 800
# A CPU time as the admin writes it ("0.42 ms", "12 ms", "1.5 s"), and with the replay's limit.
FIGURE = re.compile(r"^\d+(\.\d+)? m?s$")
CPU_FACT = re.compile(r"^\d+(\.\d+)? m?s \(limit 30 s a replay\)$")

# Where each box lies in the window, and whether what it holds is all within reach: shown whole, or
# scrolled to inside the box (overflow-x auto), not cut off.
BOXES = """selectors => selectors.map(selector => {
    const box = document.querySelector(selector);
    const shown = box.getBoundingClientRect();
    return {
        selector,
        left: shown.left,
        right: shown.right,
        scrolls: ["auto", "scroll"].includes(getComputedStyle(box).overflowX),
        fits: box.scrollWidth <= box.clientWidth + 1,
    };
})"""

# The labels of the timeline that lie over one of its bars, measured by the browser's own text layout.
LABELS_OVER_BARS = """() => {
    const timeline = document.querySelector("svg.dw-timeline");
    const boxes = selector => [...timeline.querySelectorAll(selector)].map(e => e.getBoundingClientRect());
    const bars = boxes("rect.dw-bar");
    return [...timeline.querySelectorAll("text.dw-event-text")]
        .filter(text => {
            const label = text.getBoundingClientRect();
            return bars.some(bar => label.left < bar.right && bar.left < label.right
                && label.top < bar.bottom && bar.top < label.bottom);
        })
        .map(text => text.textContent);
}"""


def assert_fits_a_narrow_window(page, *selectors):
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW  # no sideways scrolling
    for box in page.evaluate(BOXES, list(selectors)):
        assert 0 <= box["left"] and box["right"] <= NARROW, box
        assert box["fits"] or box["scrolls"], box


@pytest.fixture(scope="session")
def chromium():
    """The system's Chromium. A test installs nothing: the machine that runs the suite provides it."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}, so the admin cannot be tested in a browser. "
            "Install it from the distribution's packages: apt-get install chromium",
            pytrace=False,
        )
    return CHROMIUM


@pytest.fixture
def inline_workflows(settings):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor"}


def test_approve_an_instance_in_the_browser(live_server, chromium, inline_workflows, transactional_db):
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("reviewer", "reviewer@example.com", "a-long-test-password")
    instance = workflows.get("approval").create(id="order-42", params={"amount": 120, "currency": "EUR"})
    assert instance.status()["status"] == "waiting"  # the inline executor ran it up to its wait
    queued = workflows.get("approval").create(id="order-43", params={"amount": 75, "currency": "EUR"})
    # A few neighbours, so the list shows several statuses.
    workflows.get("three-steps").create(id="order-41", params={"amount": 80})
    workflows.get("sleeper").create(id="nightly-report", params={"duration": "8 hours"})
    workflows.get("uncaught").create(id="import-7", params={})
    workflows.get("sleeper").create(id="weekly-digest", params={"duration": "7 days"}).pause()
    workflows.get("approval").create(id="order-40", params={"amount": 990}).terminate()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    # Playwright's sync API keeps an event loop in this thread, where Django refuses database calls:
    # everything in the database is set up before it starts and checked after it stops.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_workflows/instance/")
            page.fill("#id_username", "reviewer")
            page.fill("#id_password", "a-long-test-password")
            page.click("input[type=submit]")
            expect(page.locator("#result_list")).to_be_visible()
            expect(page.locator(".dw-status-bar")).to_contain_text("waiting")
            # The CPU time of each instance's replays, a column the list sorts by.
            expect(page.locator("th.column-cpu_time")).to_contain_text("CPU")
            listed_cpu = page.locator("tr:has(th.field-instance_id a:text-is('order-41')) td.field-cpu_time")
            expect(listed_cpu).to_have_text(FIGURE)
            listed_cpu_text = listed_cpu.inner_text()
            page.screenshot(path=str(SCREENSHOTS / "instance-list.png"), full_page=True)

            page.get_by_role("link", name="order-42").click()
            headline = page.locator(".dw-headline .dw-badge")
            expect(headline).to_have_text("waiting")
            expect(page.locator(".dw-awaiting")).to_contain_text("Waiting for manager-approval")
            page.fill(".dw-awaiting textarea[name=comment]", "Within budget.")
            page.locator(".dw-awaiting").get_by_role("button", name="Approve").click()

            expect(page.locator(".messagelist")).to_contain_text("Approved: event 'manager-approval' sent")
            expect(headline).to_have_text("complete")
            expect(page.locator("svg.dw-timeline")).to_contain_text("manager-approval · admin:reviewer")
            assert page.evaluate(LABELS_OVER_BARS) == []
            # What its replays cost, and each step's CPU time, in the journal and beside its bars.
            cpu_fact = page.locator(".dw-cpu-fact dd")
            expect(cpu_fact).to_have_text(CPU_FACT)
            cpu_fact_text = cpu_fact.inner_text()
            expect(page.locator("td.dw-step-cpu").first).to_have_text(FIGURE)
            expect(page.locator("svg.dw-timeline text.dw-cpu-text").first).to_contain_text("CPU ")
            page.screenshot(path=str(SCREENSHOTS / "instance-timeline.png"), full_page=True)
            instance_page = page.url

            page.locator(".dw-headline").get_by_role("link", name="approval").click()
            expect(page.locator("svg.dw-diagram")).to_contain_text("expire")
            page.screenshot(path=str(SCREENSHOTS / "workflow-diagram.png"), full_page=True)
            workflow_page = page.url

            # The same pages in a narrow window, beside the admin's navigation sidebar.
            page.set_viewport_size({"width": NARROW, "height": 900})
            page.goto(instance_page)
            expect(page.locator(".dw-headline .dw-badge")).to_have_text("complete")
            assert_fits_a_narrow_window(
                page,
                "#timeline .dw-scroll",
                ".dw-diagram-scroll",
                "section[aria-labelledby=dw-steps-title] .dw-table-scroll",
            )
            assert page.evaluate(LABELS_OVER_BARS) == []
            page.screenshot(path=str(SCREENSHOTS / "instance-timeline-800.png"), full_page=True)
            page.goto(workflow_page)
            assert_fits_a_narrow_window(page, ".dw-diagram-scroll", ".dw-source")
            page.screenshot(path=str(SCREENSHOTS / "workflow-diagram-800.png"), full_page=True)
            page.goto(f"{live_server.url}/admin/django_workflows/instance/approvals/")
            assert_fits_a_narrow_window(page, ".dw-table-scroll")
            page.screenshot(path=str(SCREENSHOTS / "approvals-800.png"), full_page=True)
            page.get_by_role("link", name="order-43").click()  # the row's link: the instance's page
            expect(page.locator(".dw-awaiting")).to_contain_text("Waiting for manager-approval")
            assert page.url.endswith(f"/instance/{queued.pk}/change/")
        finally:
            browser.close()

    event = Event.objects.get(instance_id=instance.pk)
    assert (event.payload, event.sender) == (
        {"outcome": "approved", "comment": "Within budget."},
        "admin:reviewer",
    )
    assert instance.status()["output"]["status"] == "approved"
    # The figures the pages showed are the instance's own.
    assert cpu_fact_text.startswith(human_milliseconds(Instance.objects.get(pk=instance.pk).cpu_ms) + " ")
    assert listed_cpu_text == human_milliseconds(Instance.objects.get(instance_id="order-41").cpu_ms)
    for name in (
        "instance-list.png",
        "instance-timeline.png",
        "workflow-diagram.png",
        "instance-timeline-800.png",
        "workflow-diagram-800.png",
        "approvals-800.png",
    ):
        assert (SCREENSHOTS / name).stat().st_size > 10_000, name
