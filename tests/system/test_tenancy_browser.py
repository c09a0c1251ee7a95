"""Two tenants (tests/tenancy) in the admin, in Chromium: tenant a's member sees and approves their own
instance from the approval queue, and the same Approve button, aimed at tenant b's instance, is a 404
that leaves it waiting; b's instance page is, to them, an instance that does not exist."""

import pytest

from django_workflows import workflows
from django_workflows.models import Instance
from tests.system.test_admin_browser import CHROMIUM_ARGS, chromium  # noqa: F401  (the fixture)
from tests.tenancy import SETTINGS, make_tenants

pytestmark = pytest.mark.django_version
PASSWORD = "a-long-test-password"


def test_a_tenant_approves_their_own_and_cannot_reach_the_others(live_server, chromium, settings,  # noqa: F811
                                                                  transactional_db):
    from playwright.sync_api import expect, sync_playwright

    settings.DJANGO_WORKFLOWS = SETTINGS
    member = make_tenants()["a"]
    member.set_password(PASSWORD)
    member.save()
    workflows.get("approval").create(id="ours", params={"tenant": "a"})
    workflows.get("approval").create(id="theirs", params={"tenant": "b"})
    theirs = Instance.objects.get(instance_id="theirs")
    assert theirs.status == "waiting"

    # Playwright's sync API keeps an event loop in this thread, where Django refuses database calls:
    # everything in the database is set up before it starts and checked after it stops.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_workflows/instance/approvals/")
            page.fill("#id_username", member.username)
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            queue = page.locator("#content")
            expect(queue).to_contain_text("ours")
            expect(queue).not_to_contain_text("theirs")

            # The real Approve button, its form aimed at the other tenant's instance.
            page.goto(f"{live_server.url}/admin/django_workflows/instance/?q=ours")
            page.get_by_role("link", name="ours").click()
            awaiting = page.locator(".dw-awaiting")
            expect(awaiting).to_contain_text("Waiting for manager-approval")
            decide = f"/admin/django_workflows/instance/{theirs.pk}/decide/"
            page.evaluate("action => { document.querySelector('.dw-awaiting form').action = action }", decide)
            with page.expect_response(lambda r: r.url.endswith(decide)) as answer:
                awaiting.get_by_role("button", name="Approve").click()
            assert answer.value.status == 404

            # And their page is one that does not exist.
            page.goto(f"{live_server.url}/admin/django_workflows/instance/{theirs.pk}/change/")
            expect(page.locator(".messagelist")).to_contain_text("doesn’t exist")
            expect(page.locator("#content")).not_to_contain_text("theirs")

            # Their own, the button approves.
            page.goto(f"{live_server.url}/admin/django_workflows/instance/approvals/")
            page.get_by_role("link", name="ours").first.click()
            page.locator(".dw-awaiting").get_by_role("button", name="Approve").click()
            expect(page.locator(".messagelist")).to_contain_text("Approved: event 'manager-approval' sent")
        finally:
            browser.close()
    assert Instance.objects.get(instance_id="ours").status == "complete"
    assert Instance.objects.get(instance_id="theirs").status == "waiting"
