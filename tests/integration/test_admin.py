"""The admin: the instance list, the instance page, approve and reject, events, steering, the approval
queue and the workflow pages, with their permissions, CSRF protection and escaping."""

import inspect
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.reading.drawing.timeline import human_duration, render_timeline, tick_label
from django_workflows.models import Event, Instance
from tests.index_catalog import query_plan
from tests.testapp.workflows import Approval

LIST_URL = reverse("admin:django_workflows_instance_changelist")
APPROVALS_URL = reverse("admin:django_workflows_instance_approvals")
SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"


class MarkupEverywhere(WorkflowEntrypoint):
    """Puts markup where the admin shows text: a step name, a step error, the instance's error."""

    name = "markup-everywhere"

    def run(self, event, step):
        def fail():
            raise ValueError(event.payload["message"])

        step.do("<b>bold</b>", fail, config={"retries": {"limit": 0}})


# Registered only for the tests that use it, so the rest of the suite sees the test app's workflows.
registry.unregister(MarkupEverywhere)


@pytest.fixture
def markup_everywhere():
    registry.register(MarkupEverywhere)
    yield
    registry.unregister(MarkupEverywhere)


class TwoSignOffs(WorkflowEntrypoint):
    """Two people sign off in turn; the customer may cancel instead of the second."""

    name = "two-sign-offs"
    approvals = {"sign-off"}

    def run(self, event, step):
        first = step.wait_for_event("first", "sign-off", timeout="1 day")
        second = step.wait_for_event("second", ["order-cancelled", "sign-off"], timeout="1 day")
        return [first.payload, {"type": second.type, "payload": second.payload}]


registry.unregister(TwoSignOffs)


@pytest.fixture
def two_sign_offs():
    registry.register(TwoSignOffs)
    yield
    registry.unregister(TwoSignOffs)


def change_url(instance):
    return reverse("admin:django_workflows_instance_change", args=[instance.pk])


def decide_url(instance):
    return reverse("admin:django_workflows_instance_decide", args=[instance.pk])


def send_event_url(instance):
    return reverse("admin:django_workflows_instance_send_event", args=[instance.pk])


def steer_url(instance, action):
    return reverse("admin:django_workflows_instance_steer", args=[instance.pk, action])


def workflow_url(name):
    return reverse("admin:django_workflows_instance_workflow", args=[name])


def post(client, url, data=None):
    """POST, and follow the redirect to the page that shows the messages."""
    return client.post(url, data or {}, follow=True)


def messages_of(response):
    """The messages the page after a POST shows (each shown once, so none carries over)."""
    return [(message.level_tag, str(message)) for message in response.context["messages"]]


def landed_on(response):
    return response.redirect_chain[-1][0]


def listed_ids(response):
    return re.findall(r'<th class="field-instance_id"><a href="[^"]+">([^<]+)</a>', response.content.decode())


def staff(*codenames, username="staff"):
    """A staff user with only the given permissions of the workflows app."""
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_workflows", codename__in=codenames)
    )
    client = Client()
    client.force_login(user)
    return client


def decision(outcome, step="approval-1", **fields):
    """The fields of an Approve or Reject button: the outcome, and the wait the page showed."""
    return {"outcome": outcome, "step": step, **fields}


def waiting_approval(env, **params):
    instance = workflows.get("approval").create(params=params)
    env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    return instance


def status_of(instance):
    return instance.status()["status"]


# The list.


def test_the_list_shows_each_instance_with_its_badge_step_and_times(workflows_env, admin_client):
    waiting = waiting_approval(workflows_env)
    done = workflows.get("three-steps").create(id="done-1")
    workflows_env.run_until_idle()
    response = admin_client.get(LIST_URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert set(listed_ids(response)) == {waiting.id, done.id}
    assert '<span class="dw-badge dw-status-waiting">waiting</span>' in html
    assert '<span class="dw-badge dw-status-complete">complete</span>' in html
    assert "approval-1" in html  # the current step of the waiting instance
    wake_at = Instance.objects.get(pk=waiting.pk).wake_at
    assert f'<time datetime="{wake_at.isoformat()}"' in html
    # The workflow column leads to the workflow's diagram.
    assert f'href="{workflow_url("approval")}"' in html
    assert f'href="{APPROVALS_URL}"' in html


def test_counts_per_status_above_the_list_follow_the_workflow_filter(workflows_env, admin_client):
    waiting_approval(workflows_env)
    waiting_approval(workflows_env)
    workflows.get("three-steps").create()
    workflows.get("uncaught").create()
    workflows_env.run_until_idle()

    def counts(response):
        html = response.content.decode()
        bar = html[
            html.index('class="dw-status-bar"') : html.index("</nav>", html.index('class="dw-status-bar"'))
        ]
        return dict(re.findall(r'dw-status-(\w+)">\w[\w ]*</span> <strong>(\d+)</strong>', bar))

    everything = counts(admin_client.get(LIST_URL))
    assert everything["waiting"] == "2" and everything["complete"] == "1" and everything["errored"] == "1"
    assert everything["queued"] == "0"
    only_approval = counts(admin_client.get(LIST_URL, {"workflow": "approval"}))
    assert (
        only_approval["waiting"] == "2"
        and only_approval["complete"] == "0"
        and only_approval["errored"] == "0"
    )


def test_filters_by_workflow_status_and_date_and_search_by_id(workflows_env, admin_client):
    waiting = waiting_approval(workflows_env)
    done = workflows.get("three-steps").create(id="findable-id")
    workflows_env.run_until_idle()
    assert listed_ids(admin_client.get(LIST_URL, {"workflow": "three-steps"})) == [done.id]
    assert listed_ids(admin_client.get(LIST_URL, {"status__exact": "waiting"})) == [waiting.id]
    assert listed_ids(admin_client.get(LIST_URL, {"q": "findable"})) == [done.id]
    tomorrow = (
        (workflows_env.now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0).isoformat()
    )
    assert listed_ids(admin_client.get(LIST_URL, {"created_at__gte": tomorrow})) == []
    assert len(listed_ids(admin_client.get(LIST_URL, {"created_at__lt": tomorrow}))) == 2


def test_the_search_by_id_is_a_prefix_as_typed(workflows_env, admin_client):
    # Ids are case-sensitive, and the search is of a prefix of the id as typed: on SQLite too, whose LIKE
    # ignores case. LIKE's wildcards in the term are plain characters.
    upper = workflows.get("three-steps").create(id="Case-1")
    lower = workflows.get("three-steps").create(id="case-2")
    workflows.get("three-steps").create(id="cxse-3")
    workflows_env.run_until_idle()
    assert listed_ids(admin_client.get(LIST_URL, {"q": "Case"})) == [upper.id]
    assert listed_ids(admin_client.get(LIST_URL, {"q": "case"})) == [lower.id]
    assert listed_ids(admin_client.get(LIST_URL, {"q": "c_se"})) == []
    assert listed_ids(admin_client.get(LIST_URL, {"q": "c%"})) == []
    assert listed_ids(admin_client.get(LIST_URL, {"q": "case-2"})) == [lower.id]
    # Ids are ASCII: a term that is not finds none, without an error; the highest ASCII character ends a
    # range too.
    assert listed_ids(admin_client.get(LIST_URL, {"q": "case\U0010ffff"})) == []
    assert listed_ids(admin_client.get(LIST_URL, {"q": "cäse"})) == []
    assert listed_ids(admin_client.get(LIST_URL, {"q": "case\x7f"})) == []


def test_the_search_by_id_reads_a_range_of_the_id_index(workflows_env):
    plan = query_plan(Instance.objects.id_starts_with("order-1").order_by("-created_at", "-id").values("pk")[:100])
    assert "dw_instance_unique_by_id" in plan, plan
    if connection.vendor == "sqlite":
        # A range of the index, not a scan of all of it (LIKE ... ESCAPE was).
        assert "dw_instance_unique_by_id (instance_id>? AND instance_id<?)" in plan, plan
    else:
        assert "Index Cond" in plan and "~>=~" in plan, plan


def test_the_number_of_queries_of_the_list_does_not_grow_with_its_rows(workflows_env, admin_client):
    def queries():
        with CaptureQueriesContext(connection) as ctx:
            response = admin_client.get(LIST_URL)
        assert response.status_code == 200
        return len(ctx.captured_queries), len(listed_ids(response))

    workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    queries()  # warm the caches that the first admin request fills (content types, permissions)
    one, rows = queries()
    assert rows == 1
    for n in range(29):
        workflows.get(["approval", "sleeper", "three-steps", "uncaught"][n % 4]).create(params={})
    workflows_env.run_until_idle()
    thirty, rows = queries()
    assert rows == 30
    assert thirty == one


# The instance page.


def test_params_output_and_error_are_pretty_printed_and_escaped(
    workflows_env, admin_client, markup_everywhere
):
    echoed = workflows.get("three-steps").create(params={"note": SCRIPT})
    broken = workflows.get("markup-everywhere").create(params={"message": SCRIPT})
    workflows_env.run_until_idle()
    assert status_of(broken) == "errored"

    html = admin_client.get(change_url(echoed)).content.decode()
    assert SCRIPT not in html
    assert f"{{\n  &quot;note&quot;: &quot;{ESCAPED_SCRIPT}&quot;\n}}" in html  # params, indented
    assert f"&quot;params&quot;: {{\n    &quot;note&quot;: &quot;{ESCAPED_SCRIPT}&quot;" in html  # the output

    html = admin_client.get(change_url(broken)).content.decode()
    assert SCRIPT not in html and "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;-1" in html  # the step's key, in the journal and the timeline
    assert f"<strong>ValueError</strong>: {ESCAPED_SCRIPT}" in html  # the step's error
    assert f"&quot;message&quot;: &quot;{ESCAPED_SCRIPT}&quot;" in html  # the instance's error
    assert f"ValueError: {ESCAPED_SCRIPT}" in html  # the traceback
    assert 'class="dw-traceback"' in html and "Traceback (most recent call last)" in html
    listing = admin_client.get(LIST_URL).content.decode()
    assert SCRIPT not in listing


def test_the_journal_is_read_only(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    page = admin_client.get(change_url(instance)).content.decode()
    assert 'name="_save"' not in page
    response = admin_client.post(change_url(instance), {"status": "complete", "instance_id": "other"})
    assert response.status_code == 403
    assert admin_client.get(reverse("admin:django_workflows_instance_add")).status_code == 403
    assert (
        admin_client.get(reverse("admin:django_workflows_instance_delete", args=[instance.pk])).status_code
        == 403
    )
    assert (
        status_of(instance) == "waiting" and Instance.objects.get(pk=instance.pk).instance_id == instance.id
    )


def test_the_timeline_draws_attempts_and_the_retry_delays_between_them(workflows_env, admin_client):
    config = {"retries": {"limit": 3, "delay": "10 seconds", "backoff": "constant"}}
    instance = workflows.get("flaky").create(params={"failures": 2, "config": config})
    workflows_env.run_until_idle()
    html = admin_client.get(change_url(instance)).content.decode()
    assert html.count('class="dw-bar dw-attempt-failed"') == 1
    assert 'class="dw-next-attempt"' in html  # the retry waits for its delay

    workflows_env.advance("30 seconds")
    assert status_of(instance) == "complete"
    html = admin_client.get(change_url(instance)).content.decode()
    assert html.count('class="dw-bar dw-attempt-failed"') == 2
    assert html.count('class="dw-bar dw-attempt-ok"') == 1
    assert html.count("<title>retry delay 10 s</title>") == 2
    assert "ValueError: failure 2" in html  # the failed attempt's error, in its tooltip
    assert '3 <span class="dw-quiet">(2 failed)</span>' in html


def test_the_timeline_draws_waits_with_deadlines_sleeps_and_events_with_their_senders(
    workflows_env, admin_client
):
    instance = waiting_approval(workflows_env)
    html = admin_client.get(change_url(instance)).content.decode()
    assert 'class="dw-deadline"' in html and "deadline of approval-1" in html
    assert 'class="dw-bar dw-bar-wait dw-bar-ahead"' in html  # the part of the wait still ahead
    assert 'class="dw-now"' in html

    instance.send_event(type="manager-approval", payload={"outcome": "approved"}, sender="api:carol")
    workflows_env.run_until_idle()
    html = admin_client.get(change_url(instance)).content.decode()
    assert "manager-approval · api:carol" in html
    assert "manager-approval from api:carol, consumed at" in html
    assert 'class="dw-now"' not in html  # a finished instance has nothing ahead

    sleeper = workflows.get("sleeper").create(params={})
    workflows_env.run_until_idle()
    html = admin_client.get(change_url(sleeper)).content.decode()
    assert 'class="dw-bar dw-bar-sleep"' in html and 'class="dw-bar dw-bar-sleep dw-bar-ahead"' in html


def rows_on(html):
    return re.findall(r'class="dw-row-label"><title>[^<]*</title>(\d+)\. ', html)


def test_the_timeline_shows_50_steps_a_page(workflows_env, admin_client):
    instance = workflows.get("loop").create(params={"n": 120, "then_sleep": True})
    workflows_env.run_until_idle()
    first = admin_client.get(change_url(instance)).content.decode()
    assert rows_on(first) == [str(n) for n in range(1, 51)]
    assert "Steps 1–50 of 121" in first and "?steps_page=3#timeline" in first
    last = admin_client.get(change_url(instance), {"steps_page": 3}).content.decode()
    assert rows_on(last) == [str(n) for n in range(101, 122)]
    assert "121. rest-1" in last
    assert (
        rows_on(admin_client.get(change_url(instance), {"steps_page": "nonsense"}).content.decode())[0] == "1"
    )
    assert rows_on(admin_client.get(change_url(instance), {"steps_page": 99}).content.decode())[0] == "101"


def test_an_instance_of_1000_steps_costs_the_queries_of_one_step(workflows_env, admin_client):
    small = workflows.get("loop").create(params={"n": 1})
    big = workflows.get("loop").create(params={"n": 1000})
    workflows_env.run_until_idle()
    admin_client.get(change_url(small))  # warm the caches of the first admin request

    def page(instance):
        with CaptureQueriesContext(connection) as ctx:
            response = admin_client.get(change_url(instance))
        assert response.status_code == 200
        return len(ctx.captured_queries), response.content.decode()

    small_queries, _ = page(small)
    big_queries, html = page(big)
    assert big_queries == small_queries
    assert len(rows_on(html)) == 50 and "Steps 1–50 of 1000" in html
    assert "×1000" in html  # the diagram's loop step, done 1000 times


def test_the_instance_page_marks_the_steps_done_on_the_diagram(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    html = admin_client.get(change_url(instance)).content.decode()
    diagram = html[html.index('<svg xmlns="http://www.w3.org/2000/svg" class="dw-diagram"') :]
    assert re.search(r'class="dw-node dw-kind-do dw-state-done"><title>step.do\(&#x27;ask&#x27;\)', diagram)
    assert re.search(
        r'class="dw-node dw-kind-wait-for-event dw-state-current"><title>'
        r"step.wait_for_event\(&#x27;approval&#x27;\)",
        diagram,
    )
    assert re.search(
        r'class="dw-node dw-kind-do dw-state-pending"><title>step.do\(&#x27;expire&#x27;\)', diagram
    )


def test_an_instance_whose_workflow_is_gone_still_has_its_page(
    workflows_env, admin_client, markup_everywhere
):
    instance = workflows.get("markup-everywhere").create(params={"message": "x"})
    workflows_env.run_until_idle()
    registry.unregister(MarkupEverywhere)
    response = admin_client.get(change_url(instance))
    assert response.status_code == 200
    assert "No diagram: No workflow named &#x27;markup-everywhere&#x27;" in response.content.decode()
    admin_client.post(steer_url(instance, "restart"))
    assert status_of(instance) == "queued"


# Approve, reject and send events.


def test_approve_sends_the_awaited_event_with_the_comment_and_the_user_as_sender(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    page = admin_client.get(change_url(instance)).content.decode()
    assert (
        'value="approved"' in page
        and 'value="rejected"' in page
        and "Waiting for <code>manager-approval</code>" in page
    )
    response = post(admin_client, decide_url(instance), decision("approved", comment="  fine by me "))
    assert response.redirect_chain == [(change_url(instance), 302)]
    assert messages_of(response) == [
        ("success", f"Approved: event 'manager-approval' sent to approval/{instance.id}.")
    ]
    event = Event.objects.get()
    assert (event.type, event.payload, event.sender) == (
        "manager-approval",
        {"outcome": "approved", "comment": "fine by me"},
        "admin:admin",
    )
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "approved"
    history = admin_client.get(reverse("admin:django_workflows_instance_history", args=[instance.pk]))
    assert "Approved: event &#x27;manager-approval&#x27; sent." in history.content.decode()


def test_reject_without_a_comment_sends_only_the_outcome(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    admin_client.post(decide_url(instance), decision("rejected", comment=""))
    assert Event.objects.get().payload == {"outcome": "rejected"}
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "rejected"


def test_a_decision_for_an_instance_that_waits_for_no_event_sends_nothing(workflows_env, admin_client):
    sleeping = workflows.get("sleeper").create(params={})
    done = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    assert status_of(sleeping) == "waiting"
    for instance in (sleeping, done):
        assert 'value="approved"' not in admin_client.get(change_url(instance)).content.decode()
        response = post(admin_client, decide_url(instance), decision("approved"))
        [(level, text)] = messages_of(response)
        assert level == "error" and "not waiting for an event" in text
    waiting = waiting_approval(workflows_env)
    [(level, text)] = messages_of(post(admin_client, decide_url(waiting), decision("maybe")))
    assert level == "error" and "Select a valid choice" in text
    assert not Event.objects.exists()


def test_a_decision_is_not_sent_to_a_wait_the_page_did_not_show(workflows_env, admin_client, two_sign_offs):
    instance = workflows.get("two-sign-offs").create()
    workflows_env.run_until_idle()
    instance.send_event(type="sign-off", payload={"n": 1})
    workflows_env.run_until_idle()
    assert Instance.objects.get(pk=instance.pk).current_step == "second-1"
    # Someone looked at the page while it waited at "first"; it has moved on to "second" since.
    [(level, text)] = messages_of(
        post(admin_client, decide_url(instance), decision("approved", step="first-1"))
    )
    assert level == "error" and "no longer waits at step 'first-1' but at 'second-1'" in text
    assert Event.objects.count() == 1 and status_of(instance) == "waiting"
    post(admin_client, decide_url(instance), decision("approved", step="second-1"))
    workflows_env.run_until_idle()
    assert instance.status()["output"] == [{"n": 1}, {"type": "sign-off", "payload": {"outcome": "approved"}}]


def test_a_decision_sends_the_declared_approval_among_the_types_a_wait_names(
    workflows_env, admin_client, two_sign_offs
):
    instance = workflows.get("two-sign-offs").create()
    workflows_env.run_until_idle()
    instance.send_event(type="sign-off", payload={"n": 1})
    workflows_env.run_until_idle()
    # The second wait names order-cancelled first; only sign-off is the workflow's approval.
    assert Instance.objects.get(pk=instance.pk).waiting_for == ["order-cancelled", "sign-off"]
    response = post(admin_client, decide_url(instance), decision("rejected", step="second-1"))
    assert messages_of(response) == [
        ("success", f"Rejected: event 'sign-off' sent to two-sign-offs/{instance.id}.")
    ]
    workflows_env.run_until_idle()
    assert instance.status()["output"][1] == {"type": "sign-off", "payload": {"outcome": "rejected"}}


def test_a_wait_for_webhooks_gets_no_approve_or_reject(workflows_env, admin_client):
    race = workflows.get("race").create(params={})
    workflows_env.run_until_idle()
    assert status_of(race) == "waiting"
    page = admin_client.get(change_url(race)).content.decode()
    assert 'value="approved"' not in page and "dw-awaiting" not in page
    # The event it waits for can still be sent by hand, deliberately.
    assert 'name="type" value="payment-success"' in page
    # A decision posted anyway sends nothing: payment-success is the payment provider's to send.
    response = post(admin_client, decide_url(race), decision("rejected", step="payment-1"))
    [(level, text)] = messages_of(response)
    assert level == "error"
    assert "waits for 'payment-success' or 'payment-failure', which workflow 'race' does not declare" in text
    assert not Event.objects.exists() and status_of(race) == "waiting"


def test_send_an_event_with_a_json_payload(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    response = post(
        admin_client,
        send_event_url(instance),
        {"type": "manager-approval", "payload": '{"outcome": "approved", "n": [1, 2]}'},
    )
    assert messages_of(response) == [("success", f"Event 'manager-approval' sent to approval/{instance.id}.")]
    event = Event.objects.get()
    assert event.payload == {"outcome": "approved", "n": [1, 2]} and event.sender == "admin:admin"
    workflows_env.run_until_idle()
    assert status_of(instance) == "complete"


def test_bad_json_is_a_form_error_and_nothing_is_sent(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    response = post(
        admin_client, send_event_url(instance), {"type": "manager-approval", "payload": "{outcome: yes"}
    )
    assert response.redirect_chain == [(change_url(instance), 302)]
    [(level, text)] = messages_of(response)
    assert level == "error" and text.startswith(
        "Nothing was sent. Payload (JSON): The payload is not valid JSON:"
    )
    assert not Event.objects.exists()
    assert status_of(instance) == "waiting"


def test_engine_errors_become_messages_not_server_errors(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    response = post(admin_client, send_event_url(instance), {"type": "not valid!", "payload": ""})
    [(level, text)] = messages_of(response)
    assert response.status_code == 200 and level == "error" and "Invalid event type 'not valid!'" in text
    instance.terminate()
    response = post(admin_client, send_event_url(instance), {"type": "manager-approval", "payload": "{}"})
    [(level, text)] = messages_of(response)
    assert level == "error" and "it is terminated and will not wait for events again" in text
    assert not Event.objects.exists()


def test_buffered_events_are_listed_on_the_page(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    admin_client.post(send_event_url(instance), {"type": "reminder", "payload": json.dumps({"note": SCRIPT})})
    admin_client.post(send_event_url(instance), {"type": "other", "payload": ""})
    html = admin_client.get(change_url(instance)).content.decode()
    buffered = html[html.index("<h3>Buffered") : html.index("<h3>Send an event")]
    assert re.findall(r'<tr class="dw-buffered"><td><code>([^<]+)</code>', buffered) == ["reminder", "other"]
    assert "admin:admin" in buffered and ESCAPED_SCRIPT in buffered and SCRIPT not in html
    assert 'class="dw-event dw-event-buffered"' in html  # and drawn in the timeline's events lane


def test_redirects_back_only_to_this_site(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    response = admin_client.post(decide_url(instance), decision("approved", next="https://evil.example/"))
    assert response.url == change_url(instance)
    other = waiting_approval(workflows_env)
    response = admin_client.post(decide_url(other), decision("approved", next=APPROVALS_URL))
    assert response.url == APPROVALS_URL


# Pause, resume, terminate, restart.


def test_steer_an_instance_from_its_page(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    page = admin_client.get(change_url(instance)).content.decode()
    assert (
        f'action="{steer_url(instance, "pause")}"' in page
        and f'action="{steer_url(instance, "resume")}"' not in page
    )

    response = post(admin_client, steer_url(instance, "pause"))
    assert response.redirect_chain == [(change_url(instance), 302)]
    assert messages_of(response) == [("success", f"Instance approval/{instance.id} paused.")]
    assert status_of(instance) == "paused"
    admin_client.post(steer_url(instance, "resume"))
    assert status_of(instance) == "queued"
    workflows_env.run_until_idle()
    admin_client.post(steer_url(instance, "terminate"))
    assert status_of(instance) == "terminated"
    admin_client.post(steer_url(instance, "restart"))
    workflows_env.run_until_idle()
    assert status_of(instance) == "waiting"
    history = admin_client.get(
        reverse("admin:django_workflows_instance_history", args=[instance.pk])
    ).content.decode()
    assert all(f"<td>{done}.</td>" in history for done in ("Paused", "Resumed", "Terminated", "Restarted"))


def test_a_transition_not_allowed_is_a_warning_and_changes_nothing(workflows_env, admin_client):
    instance = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    before = Instance.objects.get(pk=instance.pk).updated_at
    response = post(admin_client, steer_url(instance, "pause"))
    [(level, text)] = messages_of(response)
    assert (
        level == "warning"
        and text.startswith("Nothing changed: Cannot pause instance")
        and "it is complete" in text
    )
    assert status_of(instance) == "complete" and Instance.objects.get(pk=instance.pk).updated_at == before


def test_steering_takes_post_and_known_actions_only(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    assert admin_client.get(steer_url(instance, "pause")).status_code == 405
    assert admin_client.get(decide_url(instance)).status_code == 405
    assert admin_client.get(send_event_url(instance)).status_code == 405
    assert admin_client.post(steer_url(instance, "delete")).status_code == 404
    missing = reverse("admin:django_workflows_instance_steer", args=[999999, "pause"])
    assert admin_client.post(missing).status_code == 404
    assert status_of(instance) == "waiting"


def test_bulk_actions_on_the_list(workflows_env, admin_client):
    first, second = waiting_approval(workflows_env), waiting_approval(workflows_env)
    done = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    selected = [first.pk, second.pk, done.pk]

    response = post(admin_client, LIST_URL, {"action": "pause_selected", "_selected_action": selected})
    assert response.redirect_chain[-1][1] == 302
    levels = [level for level, _ in messages_of(response)]
    assert levels == ["success", "warning"]
    assert "Paused 2 instances" in messages_of(response)[0][1]
    assert "Cannot pause instance three-steps/" in messages_of(response)[1][1]
    assert [status_of(i) for i in (first, second, done)] == ["paused", "paused", "complete"]

    admin_client.post(LIST_URL, {"action": "resume_selected", "_selected_action": [first.pk, second.pk]})
    assert [status_of(i) for i in (first, second)] == ["queued", "queued"]
    admin_client.post(LIST_URL, {"action": "terminate_selected", "_selected_action": [first.pk]})
    assert status_of(first) == "terminated"
    admin_client.post(LIST_URL, {"action": "restart_selected", "_selected_action": [first.pk, done.pk]})
    assert [status_of(i) for i in (first, done)] == ["queued", "queued"]



def test_the_list_offers_one_bulk_action_per_steering_change_and_the_two_variants(admin_client):
    from django_workflows.shared.transitions import TRANSITIONS

    page = admin_client.get(LIST_URL)
    choices = page.context["action_form"].fields["action"].choices
    offered = [(name, str(label)) for name, label in choices if name.endswith("_selected")]
    assert offered == [*((f"{action}_selected", f"{transition.button} selected instances")
                         for action, transition in TRANSITIONS.items()),
                       ("terminate_and_roll_back_selected", "Terminate and roll back selected instances"),
                       ("restart_from_step_selected", "Restart selected instances from the step named beside")]
    # The step a restart from a step takes is typed beside the action.
    assert 'name="from_step"' in page.content.decode() and 'name="count"' in page.content.decode()


# Permissions and CSRF.


def test_without_send_event_a_user_cannot_approve_or_send(workflows_env):
    instance = waiting_approval(workflows_env)
    client = staff("view_instance", "change_instance")
    page = client.get(change_url(instance)).content.decode()
    assert 'value="approved"' not in page and "You may not send events" in page
    assert "Send an event" not in page
    assert client.post(decide_url(instance), decision("approved")).status_code == 403
    assert (
        client.post(send_event_url(instance), {"type": "manager-approval", "payload": "{}"}).status_code
        == 403
    )
    assert 'value="approved"' not in client.get(APPROVALS_URL).content.decode()
    assert not Event.objects.exists()
    assert status_of(instance) == "waiting"


def test_without_change_permission_a_user_cannot_steer(workflows_env):
    instance = waiting_approval(workflows_env)
    client = staff("view_instance", "send_event")
    page = client.get(change_url(instance)).content.decode()
    assert steer_url(instance, "pause") not in page and 'value="approved"' in page
    assert client.post(steer_url(instance, "pause")).status_code == 403
    response = client.post(LIST_URL, {"action": "pause_selected", "_selected_action": [instance.pk]})
    assert status_of(instance) == "waiting"
    assert "pause_selected" not in client.get(LIST_URL).content.decode()
    assert response.status_code == 200  # the list again: no such action for this user
    # This user may decide, though.
    assert client.post(decide_url(instance), decision("approved")).status_code == 302
    assert Event.objects.get().sender == "admin:staff"


def test_a_user_without_view_permission_sees_no_page(workflows_env):
    instance = waiting_approval(workflows_env)
    client = staff("send_event")
    for url in (
        LIST_URL,
        change_url(instance),
        APPROVALS_URL,
        workflow_url("approval"),
        reverse("admin:django_workflows_instance_workflows"),
    ):
        assert client.get(url).status_code == 403, url
    anonymous = Client().post(decide_url(instance), decision("approved"))
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous.url
    assert not Event.objects.exists()


def test_a_post_without_the_csrf_token_is_refused(workflows_env, admin_user):
    instance = waiting_approval(workflows_env)
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    for url, data in (
        (decide_url(instance), decision("approved")),
        (send_event_url(instance), {"type": "manager-approval", "payload": "{}"}),
        (steer_url(instance, "terminate"), {}),
    ):
        assert client.post(url, data).status_code == 403, url
    assert not Event.objects.exists() and status_of(instance) == "waiting"
    # The token the page carries lets the same request through.
    page = client.get(change_url(instance)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(decide_url(instance), decision("approved", csrfmiddlewaretoken=token))
    assert response.status_code == 302 and Event.objects.count() == 1


# The approval queue.


def queued_ids(html):
    """The instances the approval queue lists, by primary key, from each row's link."""
    return re.findall(r'<a href="/admin/django_workflows/instance/(\d+)/change/" class="dw-row-link">', html)


def test_the_approval_queue_lists_only_waits_for_a_persons_decision_oldest_first(
    workflows_env, admin_client, two_sign_offs
):
    older = waiting_approval(workflows_env, who="older")
    workflows_env.advance("1 hour")
    race = workflows.get("race").create(params={})  # waits for webhooks: payment-success or -failure
    workflows_env.run_until_idle()
    workflows_env.advance("1 hour")
    newer = waiting_approval(workflows_env, who="newer")
    ticking = workflows.get("two-waits").create()  # waits for "tick", which no one approves
    sleeping = workflows.get("sleeper").create(params={})  # waiting, but for a timer, not an event
    workflows.get("three-steps").create()
    signing = workflows.get("two-sign-offs").create()
    workflows_env.run_until_idle()
    signing.send_event(type="sign-off", payload={})
    workflows_env.run_until_idle()  # now waits for order-cancelled or sign-off: a person may sign off
    assert {status_of(i) for i in (race, ticking, sleeping, signing)} == {"waiting"}

    html = admin_client.get(APPROVALS_URL).content.decode()
    assert queued_ids(html) == [str(older.pk), str(newer.pk), str(signing.pk)]
    assert "<code>payment-success</code>" not in html and "<code>tick</code>" not in html
    assert "<code>order-cancelled</code> or <code>sign-off</code>" in html
    assert "a decision sends <code>sign-off</code>" in html
    assert html.count('value="approved"') == 3
    # It names both ways of declaring an approval, the tutorial's (in events) and the attribute.
    assert "<code>\"approval\": True</code> in its <code>events</code>" in html
    assert "named in\n    <code>approvals</code>" in html
    only = admin_client.get(APPROVALS_URL, {"workflow": "approval"}).content.decode()
    assert queued_ids(only) == [str(older.pk), str(newer.pk)]
    # The counts beside the links to the queue agree with it.
    assert "Waiting for approval (3)" in admin_client.get(LIST_URL).content.decode()


def test_each_row_of_the_queue_leads_to_its_instance(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    html = admin_client.get(APPROVALS_URL).content.decode()
    rows = re.findall(r"<tr>(.*?)</tr>", html[html.index("<tbody>") :], re.S)
    [row] = rows
    # One link, the instance's id, to the instance's page; the workflow is named beside it, not linked.
    assert re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', row) == [(change_url(instance), instance.id)]
    assert '<div class="dw-quiet">approval</div>' in row
    assert workflow_url("approval") not in html


def test_approve_from_the_queue_comes_back_to_the_queue(workflows_env, admin_client):
    instance = waiting_approval(workflows_env)
    page = admin_client.get(APPROVALS_URL).content.decode()
    assert f'name="next" value="{APPROVALS_URL}"' in page
    response = admin_client.post(
        decide_url(instance), decision("approved", comment="ok", next=APPROVALS_URL)
    )
    assert response.url == APPROVALS_URL
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "approved"
    assert "Nothing is waiting for a decision." in admin_client.get(APPROVALS_URL).content.decode()


def test_the_queue_is_linked_from_the_app_index(workflows_env, admin_client):
    waiting_approval(workflows_env)
    html = admin_client.get(reverse("admin:app_list", args=["django_workflows"])).content.decode()
    assert f'<a href="{APPROVALS_URL}">Waiting for approval</a>' in html
    assert '<span class="dw-pill">1</span>' in html
    assert reverse("admin:django_workflows_instance_workflows") in html


# The workflow pages.


def test_the_workflow_page_draws_the_diagram_and_shows_the_source(workflows_env, admin_client):
    waiting_approval(workflows_env)
    response = admin_client.get(workflow_url("approval"))
    html = response.content.decode()
    assert response.status_code == 200
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="dw-diagram"' in html
    for name in ("ask", "approval", "expire"):
        assert f">{name}</text>" in html, name
    assert "except WorkflowTimeoutError" in html
    assert "def run(self, event, step):" in html  # the source beside it
    # Where run() is defined, by its dotted name, never by the server's path to the file.
    line = inspect.getsourcelines(Approval.run)[1]
    assert f"tests.testapp.workflows.Approval.run, line {line}" in html
    assert str(Path(__file__).resolve().parents[2]) not in html and "workflows.py" not in html
    assert "dw-state-" not in html  # no instance, no progress
    assert f"{LIST_URL}?workflow=approval&amp;status__exact=waiting" in html
    assert admin_client.get(workflow_url("no-such-workflow")).status_code == 404


def test_the_workflow_page_shows_the_step_limit_its_replays_enforce(workflows_env, admin_client, settings):
    settings.DJANGO_WORKFLOWS = {"STEP_LIMIT": 2}
    by_the_setting = admin_client.get(workflow_url("approval")).content.decode()
    assert "Step limit: 2 (the STEP_LIMIT setting)." in by_the_setting
    assert "Step limit: 3." in admin_client.get(workflow_url("limited")).content.decode()


def breadcrumbs(html):
    trail = re.search(r'<div class="breadcrumbs">(.*?)</div>', html, re.S).group(1)
    return [" ".join(re.sub(r"<[^>]+>", "", crumb).split()) for crumb in trail.split("&rsaquo;")]


def test_the_workflow_pages_hang_from_the_app_without_repeating_a_level(workflows_env, admin_client):
    workflows_page = reverse("admin:django_workflows_instance_workflows")
    html = admin_client.get(workflow_url("approval")).content.decode()
    assert breadcrumbs(html) == ["Home", "Workflows", "All workflows", "approval"]
    assert f'<a href="{workflows_page}">All workflows</a>' in html
    listing = admin_client.get(workflows_page).content.decode()
    assert breadcrumbs(listing) == ["Home", "Workflows", "All workflows"]


def test_the_workflows_page_lists_every_workflow(workflows_env, admin_client):
    html = admin_client.get(reverse("admin:django_workflows_instance_workflows")).content.decode()
    for name in workflows.names():
        assert f'href="{workflow_url(name)}"' in html, name
    assert "Fails ``failures`` times, then succeeds; retries as ``config`` says." in html


# The drawing helpers.


T0 = datetime(2025, 1, 1, 12, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


def at(seconds):
    return T0 + timedelta(seconds=seconds)


def do_step(key, start, end):
    """A step.do that succeeded at its first attempt, as describe_step has it."""
    attempt = {"attempt": 1, "start": at(start), "end": at(end), "success": True}
    return {
        "key": key,
        "type": "do",
        "status": "succeeded",
        "start": at(start),
        "end": at(end),
        "attempts": [attempt],
    }


def wait_step(key, start, *, end=None, deadline, sender="admin:reviewer", event_type="manager-approval"):
    """A wait for ``event_type``: ended by it at ``end``, or still waiting when ``end`` is None."""
    step = {
        "key": key,
        "type": "waitForEvent",
        "status": "succeeded" if end is not None else "waiting",
        "start": at(start),
        "end": at(end) if end is not None else None,
        "deadline": at(deadline),
        "config": {"type": [event_type]},
    }
    if end is None:
        return step, []
    step["output"] = {"type": event_type, "payload": {}, "timestamp": at(end).isoformat()}  # the step's JSON
    event = {"type": event_type, "received": at(end), "sender": sender, "consumed_by": key}
    return step, [event]


def shapes(svg, tag, css_class):
    """The elements of a tag whose class list holds ``css_class``: each as a dict of its numbers,
    with its class and its text."""
    found = []
    for element in ElementTree.fromstring(svg).iter(f"{SVG}{tag}"):
        classes = element.get("class", "").split()
        if css_class in classes:
            numbers = {key: float(element.get(key)) for key in ("x", "y", "width", "height") if element.get(key)}
            title = element.find(f"{SVG}title")  # a tooltip comes before the text
            text = element.text if title is None else title.tail
            found.append({**numbers, "class": classes, "text": text, "anchor": element.get("text-anchor")})
    return found


def text_box(text, char_width=6.0):
    """Where a text of the timeline lies, measured as the drawing measures it."""
    width = len(text["text"]) * char_width
    left = text["x"] - width if text["anchor"] == "end" else text["x"]
    return {"x": left, "y": text["y"] - 9, "width": width, "height": 12}


def overlap(a, b):
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_the_time_axis_is_to_scale_so_a_60_ms_hand_off_looks_short_beside_3_s_steps():
    svg = render_timeline([do_step("fetch-1", 0, 3), do_step("store-1", 3.06, 6.06)], [], origin=T0)
    fetch, store = shapes(svg, "rect", "dw-attempt-ok")
    hand_off = store["x"] - (fetch["x"] + fetch["width"])
    assert fetch["width"] == pytest.approx(store["width"], abs=0.2)
    assert hand_off / fetch["width"] == pytest.approx(0.06 / 3, abs=0.002)
    # Ticks fall on round offsets since queued, as far apart as the time between them.
    ticks = [(tick["x"], tick["text"]) for tick in shapes(svg, "text", "dw-tick-text")]
    assert [label for _, label in ticks] == ["+0", "+1 s", "+2 s", "+3 s", "+4 s", "+5 s", "+6 s"]
    assert ticks[0][0] == fetch["x"] and ticks[3][0] == pytest.approx(fetch["x"] + fetch["width"], abs=0.2)


def test_what_lies_far_ahead_is_shortened_behind_a_break_that_gives_its_length():
    wait, _ = wait_step("approval-1", 0.006, deadline=0.006 + 72 * 3600)
    now = T0 + timedelta(minutes=5)
    svg = render_timeline([do_step("ask-1", 0, 0.005), wait], [], origin=T0, now=now)
    [waited, ahead] = shapes(svg, "rect", "dw-bar-wait")
    # The five minutes that passed keep three quarters of the axis, to scale; the 72 hours still
    # ahead of the wait get the last quarter, behind a break labelled with their real length.
    assert "dw-bar-ahead" in ahead["class"]
    assert waited["x"] + waited["width"] == pytest.approx(270 + 0.75 * 790, abs=0.2)
    assert ahead["x"] + ahead["width"] == pytest.approx(270 + 790, abs=0.2)
    [gap] = shapes(svg, "rect", "dw-break")
    assert waited["x"] + waited["width"] < gap["x"] < ahead["x"] + ahead["width"]
    assert [text["text"] for text in shapes(svg, "text", "dw-break-text")] == ["2 d 23 h more, not to scale"]
    assert [tick["text"] for tick in shapes(svg, "text", "dw-tick-text")][-1] == "+3 d"
    # A retry due soon is drawn to scale, without a break.
    retrying = {**do_step("charge-1", 0, 1), "status": "retrying", "next_attempt": at(11)}
    assert "dw-break" not in render_timeline([retrying], [], origin=T0, now=T0 + timedelta(seconds=60))


def test_the_label_of_the_event_that_ended_a_wait_is_never_drawn_over_a_bar():
    # The wait runs to the right end of the axis: no room beside its event, so the label goes below.
    wait, events = wait_step("approval-1", 0.003, end=2.5, deadline=72 * 3600)
    svg = render_timeline([do_step("ask-1", 0, 0.002), wait], events, origin=T0)
    # The wait's own label, whole; the lane of events received below has a shortened one.
    [label] = [text for text in shapes(svg, "text", "dw-event-text") if "…" not in text["text"]]
    assert label["text"] == "manager-approval · admin:reviewer"
    box = text_box(label)
    bars = shapes(svg, "rect", "dw-bar")
    assert len(bars) == 2 and not any(overlap(box, bar) for bar in bars)
    assert 270 <= box["x"] and box["x"] + box["width"] <= 270 + 790 + 40
    # Where there is room, it stands beside the event, on the bar's line.
    wait, events = wait_step("approval-1", 0, end=1, deadline=3600)
    svg = render_timeline([wait, do_step("charge-1", 1, 10)], events, origin=T0)
    [label] = [text for text in shapes(svg, "text", "dw-event-text") if "…" not in text["text"]]
    [bar, _] = shapes(svg, "rect", "dw-bar")
    assert label["x"] > bar["x"] + bar["width"] and bar["y"] < label["y"] < bar["y"] + bar["height"] + 4
    assert not any(overlap(text_box(label), bar) for bar in shapes(svg, "rect", "dw-bar"))


def test_tick_labels_are_as_precise_as_the_ticks_are_apart():
    assert [tick_label(offset, step) for offset, step in [(0, 1), (0.25, 0.05), (1.5, 0.5), (150, 30),
                                                          (5400, 900), (3 * 86400 + 7200, 7200)]] == [
        "+0", "+250 ms", "+1.5 s", "+2 min 30 s", "+1 h 30 min", "+3 d 2 h"
    ]


def test_durations_read_like_people_write_them():
    assert [human_duration(s) for s in (0.0123, 1, 1.5, 95, 3600, 266400, 90061)] == [
        "12 ms",
        "1 s",
        "1.5 s",
        "1 min 35 s",
        "1 h",
        "3 d 2 h",
        "1 d 1 h",
    ]
