"""Security: who may do what through the API and the admin, CSRF on every admin POST, escaping of every
field a user or a workflow controls, signed webhooks and their replay, no pickle of user data, and no
secret in the logs."""

import ast
import hashlib
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db import models
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

import django_workflows
from django_workflows import WorkflowEntrypoint, workflows
from django_workflows.shared.definition import registry
from django_workflows.executors.q2 import REPLAY_TASK
from django_workflows.models import Delivery, Event, Instance, Step
from django_workflows.webhooks import sign

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
MARKUP = f"{SCRIPT}{IMG}"
RAW = ["<script>alert(1)", "<img src=x onerror"]  # what must never reach a page unescaped
ESCAPED = ["&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;"]


def user_with(*codenames, username="someone", staff=False, superuser=False):
    # No password: hashing one costs a third of a second, and these users log in with force_login
    # or a token.
    user = User.objects.create(username=username, is_staff=staff or superuser, is_superuser=superuser)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_workflows", codename__in=codenames)
    )
    return user


def waiting(env, instance_id=None, **params):
    instance = workflows.get("approval").create(id=instance_id, params=params)
    env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    return instance


def state():
    """Everything a refused request must leave as it was."""
    return (
        sorted(Instance.objects.values_list("instance_id", "status", "params", "updated_at")),
        sorted(Event.objects.values_list("pk", "type", "payload", "sender")),
        Step.objects.count(),
        LogEntry.objects.count(),
    )


# The API: every endpoint, every role.

API_ROLES = {
    "anonymous": None,
    "no permission": [],
    "view": ["view_instance"],
    "add": ["add_instance"],
    "change": ["change_instance"],
    "send_event": ["send_event"],
    "superuser": "superuser",
}
API_ENDPOINTS = {  # name: (method, path, body, the permission it needs; None: any caller)
    "list workflows": ("GET", "/workflows/", None, "view_instance"),
    "describe workflow": ("GET", "/workflows/approval/", None, "view_instance"),
    "list instances": ("GET", "/workflows/approval/instances/", None, "view_instance"),
    "create": ("POST", "/workflows/approval/instances/", {"instance_id": "new"}, "add_instance"),
    "batch": ("POST", "/workflows/approval/instances/batch/", [{"instance_id": "b1"}], "add_instance"),
    "describe instance": ("GET", "/workflows/approval/instances/a1/", None, "view_instance"),
    "change status": ("PATCH", "/workflows/approval/instances/a1/status/", {"status": "pause"},
                      "change_instance"),
    "send event": ("POST", "/workflows/approval/instances/a1/events/manager-approval/", {"outcome": "approved"},
                   "send_event"),
    "schema": ("GET", "/workflows/schema/", None, "view_instance"),
}


@pytest.mark.parametrize("role", list(API_ROLES))
def test_api_permissions_matrix(workflows_env, role):
    granted = API_ROLES[role]
    client = APIClient()
    if granted is not None:
        user = user_with(superuser=True) if granted == "superuser" else user_with(*granted)
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    outcomes = {}
    for name, (method, path, body, needed) in API_ENDPOINTS.items():
        waiting(workflows_env, "a1") if not Instance.objects.filter(instance_id="a1").exists() else None
        before = state()
        response = client.generic(method, path, json.dumps(body) if body is not None else "",
                                  content_type="application/json")
        allowed = needed is None or granted == "superuser" or (granted is not None and needed in granted)
        if allowed:
            assert response.status_code < 400, (role, name, response.status_code, response.content[:200])
        else:
            expected = 401 if granted is None else 403
            assert response.status_code == expected, (role, name, response.status_code)
            assert response.json()["error"]["code"] == ("not_authenticated" if granted is None
                                                        else "permission_denied")
            assert state() == before, (role, name)
        outcomes[name] = response.status_code
        # Start the next endpoint from a waiting a1 again.
        Instance.objects.filter(instance_id__in=["a1", "new", "b1"]).delete()
    print(f"API permissions, {role}: {outcomes}")


def test_webhooks_need_a_signature_whoever_calls(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": "whsec"}}
    waiting(workflows_env, "a1")
    url = "/workflows/approval/instances/a1/webhooks/manager-approval/"
    superuser = APIClient()
    superuser.force_authenticate(user_with(superuser=True))
    for client in (APIClient(), superuser):
        before = state()
        response = client.post(url, b'{"outcome": "approved"}', content_type="application/json")
        assert response.status_code == 401 and response.json()["error"]["code"] == "bad_signature"
        assert state() == before
    body = b'{"outcome": "approved"}'
    response = APIClient().post(url, body, content_type="application/json",
                                HTTP_X_WORKFLOWS_SIGNATURE=sign("whsec", body))
    assert response.status_code == 202


# The admin: every page and every POST, every role.

ADMIN_ROLES = {
    "anonymous": None,
    "staff, no permission": [],
    "view": ["view_instance"],
    "change": ["change_instance"],
    "send_event": ["send_event"],
    "view and send_event": ["view_instance", "send_event"],
    "superuser": "superuser",
}
VIEW, CHANGE, SEND = "view_instance", "change_instance", "send_event"


def admin_pages(instance):
    return {  # name: (url, who may see it: any one of these permissions)
        "app index": (reverse("admin:app_list", args=["django_workflows"]), {VIEW, CHANGE}),
        "instance list": (reverse("admin:django_workflows_instance_changelist"), {VIEW, CHANGE}),
        "instance page": (reverse("admin:django_workflows_instance_change", args=[instance.pk]), {VIEW, CHANGE}),
        "history": (reverse("admin:django_workflows_instance_history", args=[instance.pk]), {VIEW, CHANGE}),
        "waiting for approval": (reverse("admin:django_workflows_instance_approvals"), {VIEW, CHANGE}),
        "workflows": (reverse("admin:django_workflows_instance_workflows"), {VIEW, CHANGE}),
        "workflow diagram": (reverse("admin:django_workflows_instance_workflow", args=["approval"]),
                             {VIEW, CHANGE}),
        "add page": (reverse("admin:django_workflows_instance_add"), set()),
        "delete page": (reverse("admin:django_workflows_instance_delete", args=[instance.pk]), set()),
    }


def steer(instance, action):
    return reverse("admin:django_workflows_instance_steer", args=[instance.pk, action])


def admin_posts(env):
    """name: (instance to act on, url, data, who may do it, what shows it was done)."""
    decide = "admin:django_workflows_instance_decide"
    changelist = reverse("admin:django_workflows_instance_changelist")
    posts = {}

    def on(name, instance, url, data, needs, done):
        posts[name] = (instance, url, data, needs, done)

    def has_event(instance):
        return lambda: Event.objects.filter(instance_id=instance.pk).exists()

    def status_is(instance, status):
        return lambda: instance.status()["status"] == status

    # The admin's buttons act on what it shows: sending from it needs send_event and the instance in view
    # (a sender who may not see it learns nothing of it, not even its status in a message).
    send_seen = [{SEND}, {VIEW, CHANGE}]
    a = waiting(env)
    on("approve", a, reverse(decide, args=[a.pk]), {"outcome": "approved", "step": "approval-1"}, send_seen,
       has_event(a))
    r = waiting(env)
    on("reject", r, reverse(decide, args=[r.pk]), {"outcome": "rejected", "step": "approval-1", "comment": "no"},
       send_seen, has_event(r))
    e = waiting(env)
    on("send event", e, reverse("admin:django_workflows_instance_send_event", args=[e.pk]),
       {"type": "manager-approval", "payload": '{"outcome": "approved"}'}, send_seen, has_event(e))
    p = waiting(env)
    on("pause", p, steer(p, "pause"), {}, {CHANGE}, status_is(p, "paused"))
    u = waiting(env)
    u.pause()
    on("resume", u, steer(u, "resume"), {}, {CHANGE}, status_is(u, "queued"))
    t = waiting(env)
    on("terminate", t, steer(t, "terminate"), {}, {CHANGE}, status_is(t, "terminated"))
    s = waiting(env)
    on("restart", s, steer(s, "restart"), {}, {CHANGE}, status_is(s, "queued"))
    for action, status in [("pause", "paused"), ("terminate", "terminated"), ("restart", "queued")]:
        i = waiting(env)
        on(f"list: {action}", i, changelist, {"action": f"{action}_selected", "_selected_action": [i.pk]},
           {CHANGE}, status_is(i, status))
    i = waiting(env)
    i.pause()
    on("list: resume", i, changelist, {"action": "resume_selected", "_selected_action": [i.pk]}, {CHANGE},
       status_is(i, "queued"))
    c = waiting(env)
    on("save the instance form", c, reverse("admin:django_workflows_instance_change", args=[c.pk]),
       {"status": "complete", "instance_id": "other"}, set(), status_is(c, "complete"))
    d = waiting(env)
    on("delete", d, reverse("admin:django_workflows_instance_delete", args=[d.pk]), {"post": "yes"}, set(),
       lambda: not Instance.objects.filter(pk=d.pk).exists())
    return posts


def admin_client_for(role):
    granted = ADMIN_ROLES[role]
    client = Client()
    if granted is not None:
        user = (user_with(superuser=True, username="root") if granted == "superuser"
                else user_with(*granted, username="staff", staff=True))
        client.force_login(user)
    return client, granted


def may(granted, needs):
    """``needs``: a set of permissions any one of which will do, or a list of such sets, each needed."""
    if granted == "superuser":
        return bool(needs)  # what nobody may do (add, delete, edit the journal) the superuser may not either
    if isinstance(needs, list):
        return all(may(granted, each) for each in needs)
    return granted is not None and bool(set(granted) & needs)


@pytest.mark.parametrize("role", list(ADMIN_ROLES))
def test_admin_permissions_matrix_pages(workflows_env, role):
    client, granted = admin_client_for(role)
    instance = waiting(workflows_env, "a1", note="x")
    outcomes = {}
    for name, (url, needs) in admin_pages(instance).items():
        response = client.get(url)
        if granted is None:
            assert response.status_code == 302 and "/admin/login/" in response.url, (name, response.status_code)
        elif may(granted, needs):
            assert response.status_code == 200, (role, name, response.status_code)
        else:
            assert response.status_code in (403, 404), (role, name, response.status_code)
        outcomes[name] = response.status_code
    print(f"admin pages, {role}: {outcomes}")


@pytest.mark.parametrize("role", list(ADMIN_ROLES))
def test_admin_permissions_matrix_posts(workflows_env, role):
    client, granted = admin_client_for(role)
    posts = admin_posts(workflows_env)
    outcomes = {}
    for name, (instance, url, data, needs, done) in posts.items():
        before = state()
        response = client.post(url, data)
        if may(granted, needs):
            assert response.status_code == 302, (role, name, response.status_code)
            assert done(), (role, name)
        else:
            # Refused outright; or, for a list action the user does not have, the list again.
            if granted is None:
                assert response.status_code == 302 and "/admin/login/" in response.url, (name, response.status_code)
            elif name.startswith("list:") and VIEW in granted:
                assert response.status_code == 200, (role, name, response.status_code)
            else:
                assert response.status_code in (403, 404), (role, name, response.status_code)
            assert not done(), (role, name)
            assert state() == before, (role, name)
        outcomes[name] = response.status_code
    print(f"admin POSTs, {role}: {outcomes}")


def test_every_admin_post_without_the_csrf_token_is_refused(workflows_env):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user_with(superuser=True, username="root"))
    posts = admin_posts(workflows_env)
    for name, (instance, url, data, needs, done) in posts.items():
        before = state()
        response = client.post(url, data)
        assert response.status_code == 403, (name, response.status_code)
        assert b"CSRF" in response.content, name
        assert not done() and state() == before, name
    # A token from another session is no better.
    other = Client(enforce_csrf_checks=True)
    other.force_login(user_with(superuser=True, username="other"))
    page = other.get(reverse("admin:django_workflows_instance_changelist")).content.decode()
    foreign = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    for name, (instance, url, data, needs, done) in posts.items():
        assert client.post(url, {**data, "csrfmiddlewaretoken": foreign}).status_code == 403, name
        assert not done(), name


# Escaping: markup in every field a user or a workflow controls is text on every admin page.


class MarkupInEveryField(WorkflowEntrypoint):
    """Markup in step names (drawn in the diagram and the timeline), results, errors, waits and output."""

    name = "markup-in-every-field"
    approvals = {"go"}  # so its waits reach the approval queue too

    def run(self, event, step):
        step.do("<script>alert(1)</script>", lambda: {"<script>alert(1)</script>": '"><img src=x onerror=alert(1)>'})

        def fails():
            raise ValueError('<script>alert(1)</script>"><img src=x onerror=alert(1)>')

        try:
            step.do('"><img src=x onerror=alert(1)>', fails, config={"retries": {"limit": 1, "delay": 1}})
        except ValueError:
            pass
        step.sleep("<b>nap</b>", "1 second")
        got = step.wait_for_event("<i>wait</i>", "go", timeout="1 hour")
        if event.payload.get("fail"):
            raise RuntimeError(event.payload["fail"])
        return {"echo": event.payload, "event": got.payload}


registry.unregister(MarkupInEveryField)


@pytest.fixture
def markup_in_every_field():
    registry.register(MarkupInEveryField)
    yield
    registry.unregister(MarkupInEveryField)


def assert_escaped(html, where):
    for raw in RAW:
        assert raw not in html, (where, raw, html[max(0, html.index(raw) - 200): html.index(raw) + 200])


def test_markup_in_every_field_is_escaped_on_every_admin_page(workflows_env, markup_in_every_field, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"markup-in-every-field": "whsec"}}
    client = Client()
    client.force_login(user_with(superuser=True, username="root"))
    handle = workflows.get("markup-in-every-field")
    done = handle.create(id="done", params={"k": MARKUP, MARKUP: [MARKUP]})
    failed = handle.create(id="failed", params={"fail": MARKUP})
    live = handle.create(id="live", params={"note": MARKUP})
    workflows_env.run_until_idle()
    workflows_env.advance("2 seconds")
    for instance in (done, failed, live):
        # A buffered event and a consumed one, from senders named with markup.
        instance.send_event(type="other", payload={"p": MARKUP}, sender=f"api:{MARKUP}")
    # A webhook whose source header is markup; the comment of a decision.
    body = json.dumps({"w": MARKUP}).encode()
    assert APIClient().post("/workflows/markup-in-every-field/instances/done/webhooks/go/", body,
                            content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign("whsec", body),
                            HTTP_X_WORKFLOWS_SOURCE=MARKUP).status_code == 202
    failed.send_event(type="go", payload={"g": MARKUP}, sender=MARKUP)
    workflows_env.run_until_idle()
    assert done.status()["status"] == "complete" and failed.status()["status"] == "errored"
    assert live.status()["status"] == "waiting"
    decide = reverse("admin:django_workflows_instance_decide", args=[Instance.objects.get(instance_id="live").pk])
    client.post(decide, {"outcome": "rejected", "step": "<i>wait</i>-1", "comment": MARKUP})
    # An instance still waiting at the same wait, for the approval queue.
    waiting_too = handle.create(id="waiting", params={MARKUP: MARKUP})
    workflows_env.run_until_idle()
    workflows_env.advance("2 seconds")
    assert waiting_too.status()["status"] == "waiting"

    changelist = reverse("admin:django_workflows_instance_changelist")
    approvals = reverse("admin:django_workflows_instance_approvals")
    pages = {
        "list": changelist,
        "list, searched and filtered with markup": f"{changelist}?q={SCRIPT}&workflow={SCRIPT}",
        "waiting for approval": approvals,
        "waiting for approval, filtered with markup": f"{approvals}?workflow={IMG}",
        "workflows": reverse("admin:django_workflows_instance_workflows"),
        "diagram": reverse("admin:django_workflows_instance_workflow", args=["markup-in-every-field"]),
    }
    for instance in Instance.objects.all():
        pages[f"instance {instance.instance_id}"] = reverse("admin:django_workflows_instance_change",
                                                            args=[instance.pk])
        pages[f"history of {instance.instance_id}"] = reverse("admin:django_workflows_instance_history",
                                                              args=[instance.pk])
    seen = ""
    for where, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, where
        html = response.content.decode()
        assert_escaped(html, where)
        seen += html
    # The markup is there, as text: in the params, output, error, traceback, journal, step names in the
    # timeline and the diagram (SVG), event payloads and senders, the comment, the reflected filters.
    instance_page = client.get(pages["instance failed"]).content.decode()
    timeline = instance_page[instance_page.index('class="dw-timeline"'):]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;-1" in timeline  # a step's key in a row
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in timeline  # an attempt's error in a tooltip
    assert "go · &lt;script&gt;" in timeline  # the sender, beside the event that ended the wait
    diagram = instance_page[instance_page.index('class="dw-diagram"'):]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in diagram and "&lt;i&gt;wait&lt;/i&gt;" in diagram
    assert f"RuntimeError: {ESCAPED[0]}" in instance_page  # the traceback
    for escaped in ESCAPED:
        assert escaped in seen
    assert "webhook:&lt;script&gt;alert(1)&lt;/script&gt;" in seen  # the webhook's source
    assert "&quot;comment&quot;: &quot;&lt;script&gt;" in seen  # the decision's comment


def test_messages_after_a_post_quote_the_input_escaped(workflows_env):
    client = Client()
    client.force_login(user_with(superuser=True, username="root"))
    instance = waiting(workflows_env)
    url = reverse("admin:django_workflows_instance_send_event", args=[instance.pk])
    for data in ({"type": MARKUP, "payload": "{}"}, {"type": "ok", "payload": MARKUP},
                 {"type": "ok", "payload": '{"nul": "\\u0000"}'}, {"type": "ok", "payload": '"\\ud800"'},
                 {"type": "ok\x00", "payload": "{}"}, {"type": "ok", "payload": "[" * 100_000 + "]" * 100_000},
                 {"type": "ok", "payload": "9" * 5000}, {"type": "ok", "payload": "NaN"}):
        response = client.post(url, data, follow=True)
        html = response.content.decode()
        assert "Nothing was sent" in html
        assert_escaped(html, data)
    decide = reverse("admin:django_workflows_instance_decide", args=[instance.pk])
    html = client.post(decide, {"outcome": "approved", "step": MARKUP}, follow=True).content.decode()
    assert "no longer waits at step" in html
    assert_escaped(html, "decide")
    html = client.post(decide, {"outcome": "approved", "step": "approval-1", "comment": "a\x00b"},
                       follow=True).content.decode()
    assert "Nothing was sent" in html
    assert not Event.objects.exists()


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/", "javascript:alert(1)",
                                    "http:\\\\evil.example", "\x00https://evil.example", " //evil.example"])
def test_the_admin_redirects_back_only_to_this_site(workflows_env, target):
    client = Client()
    client.force_login(user_with(superuser=True, username="root"))
    instance = waiting(workflows_env)
    response = client.post(steer(instance, "pause"), {"next": target})
    assert response.status_code == 302
    assert response.url == reverse("admin:django_workflows_instance_change", args=[instance.pk])


# Webhooks: signatures, and the same delivery posted again.

SECRET, OTHER_SECRET = "whsec-security", "whsec-other"


@pytest.fixture
def hook(settings, workflows_env):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": SECRET, "race": OTHER_SECRET}}
    for instance_id in ("a1", "a2"):
        waiting(workflows_env, instance_id)

    def post(body, signature, instance_id="a1", workflow="approval", event_type="manager-approval", **headers):
        if signature is not None:
            headers["HTTP_X_WORKFLOWS_SIGNATURE"] = signature
        return APIClient().post(f"/workflows/{workflow}/instances/{instance_id}/webhooks/{event_type}/", body,
                                content_type="application/json", **headers)

    return post


BODY = b'{"outcome": "approved"}'


def test_the_same_signed_delivery_posted_again_is_refused(hook):
    signature = sign(SECRET, BODY)
    assert hook(BODY, signature).status_code == 202
    before = state()
    again = hook(BODY, signature)
    assert again.status_code == 409 and again.json()["error"]["code"] == "duplicate_delivery"
    assert state() == before
    # Nor to another instance, or as another event type: the signature covers the body, not the address.
    assert hook(BODY, signature, instance_id="a2").status_code == 409
    assert hook(BODY, signature, event_type="other").status_code == 409
    # With extra v1 values beside the one that matches, it is the same delivery.
    assert hook(BODY, f"{signature},v1={'0' * 64}").status_code == 409
    assert state() == before
    # Signed anew (another second), the same body is a new delivery.
    assert hook(BODY, sign(SECRET, BODY, timestamp=int(time.time()) + 1)).status_code == 202
    assert Event.objects.count() == 2


def test_the_inbox_keeps_a_digest_of_the_signature_not_the_signature(hook):
    signature = sign(SECRET, BODY)
    hook(BODY, signature)
    digest = signature.split("v1=")[1]
    delivery = Delivery.objects.get().key
    assert len(delivery) == 64 and digest not in delivery and SECRET not in delivery
    assert delivery == hashlib.sha256(f"webhook:{digest}".encode()).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_the_same_delivery_posted_concurrently_is_stored_once(live_server, settings):
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.testing.RecordingExecutor",
                                 "WEBHOOK_SECRETS": {"approval": SECRET}}
    workflows.get("approval").create(id="a1")
    signature = sign(SECRET, BODY)
    statuses, barrier = [], threading.Barrier(6)

    def deliver():
        request = urllib.request.Request(
            f"{live_server.url}/workflows/approval/instances/a1/webhooks/manager-approval/", data=BODY,
            method="POST", headers={"Content-Type": "application/json", "X-Workflows-Signature": signature})
        barrier.wait()
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [202] + [409] * 5
    assert Event.objects.count() == 1


@pytest.mark.parametrize("case", [
    "future", "stale", "another body", "another workflow's secret", "two timestamps", "no timestamp",
    "timestamp not ASCII digits", "timestamp of 5000 digits", "negative timestamp", "digest not ASCII",
    "digest upper case", "digest too short", "header injection", "empty", "only commas", "v1 without value",
])
def test_bad_signatures_are_401_and_store_nothing(hook, case):
    now = int(time.time())
    good = sign(SECRET, BODY, timestamp=now)
    digest = good.split("v1=")[1]
    signature = {
        # Beyond the 300 s tolerance by more than a slow machine takes between signing and checking.
        "future": sign(SECRET, BODY, timestamp=now + 310),
        "stale": sign(SECRET, BODY, timestamp=now - 310),
        "another body": sign(SECRET, b'{"outcome": "rejected"}'),
        "another workflow's secret": sign(OTHER_SECRET, BODY),
        "two timestamps": f"t={now + 1},{good}",
        "no timestamp": f"v1={digest}",
        "timestamp not ASCII digits": f"t=١٢٣,v1={digest}",
        "timestamp of 5000 digits": f"t={'9' * 5000},v1={digest}",
        "negative timestamp": f"t=-{now},v1={digest}",
        "digest not ASCII": f"t={now},v1={'é' * 64}",
        "digest upper case": f"t={now},v1={digest.upper()}",
        "digest too short": f"t={now},v1={digest[:32]}",
        "header injection": f"t={now},v1={digest}\r\nX-Workflows-Source: admin",
        "empty": "",
        "only commas": ",,,",
        "v1 without value": f"t={now},v1=",
    }[case]
    before = state()
    response = hook(BODY, signature.encode("utf-8").decode("latin-1"))  # as WSGI hands headers over
    assert response.status_code == 401, (case, response.status_code, response.content[:300])
    assert response.json()["error"]["code"] == "bad_signature"
    assert state() == before


def test_the_source_header_is_recorded_as_printable_text(hook):
    for n, source in enumerate(["stripe\x00", "a\r\nb", "\x1b[31mred", "x" * 500]):
        body = json.dumps({"n": n}).encode()
        assert hook(body, sign(SECRET, body), HTTP_X_WORKFLOWS_SOURCE=source).status_code == 202
    senders = list(Event.objects.order_by("pk").values_list("sender", flat=True))
    assert senders[:3] == ["webhook:stripe@127.0.0.1", "webhook:ab@127.0.0.1", "webhook:[31mred@127.0.0.1"]
    assert senders[3] == f"webhook:{'x' * 100}@127.0.0.1"


# No pickle of user data.


def test_no_module_of_the_package_imports_a_serializer_that_runs_code():
    package = Path(django_workflows.__file__).parent
    unsafe = {"pickle", "cPickle", "dill", "marshal", "shelve", "cloudpickle", "jsonpickle", "yaml"}
    found = []
    for source in package.rglob("*.py"):
        tree = ast.parse(source.read_text(), str(source))
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{source.relative_to(package)}: {name}" for name in names
                      if name.split(".")[0] in unsafe or "picklefield" in name]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("eval", "exec"):
                found.append(f"{source.relative_to(package)}: {node.func.id}()")
    assert found == []


def test_user_data_is_stored_in_json_columns():
    for model, fields in [(Instance, ["params", "output", "error", "waiting_for"]),
                          (Step, ["result", "error", "attempts", "config"]), (Event, ["payload"])]:
        for name in fields:
            assert isinstance(model._meta.get_field(name), models.JSONField), (model, name)
    for model in (Instance, Step, Event):
        for field in model._meta.get_fields():
            assert "Pickle" not in type(field).__name__ and not isinstance(field, models.BinaryField)


@pytest.mark.django_db(transaction=True)
def test_a_queued_replay_task_carries_only_the_instance_primary_key(settings):
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    settings.DJANGO_WORKFLOWS = {}  # the default executor: django-q2, on the ORM broker
    marker = "params-that-must-stay-in-the-database"
    instance = workflows.get("approval").create(id="pickled", params={"secret": marker})
    instance.send_event(type="manager-approval", payload={"p": marker}, sender="api:someone")
    tasks = [SignedPackage.loads(row.payload) for row in OrmQ.objects.all()]
    assert tasks, "nothing was enqueued"
    for task in tasks:
        # django-q2 pickles (and signs) the task; what it pickles is a function's name and a number.
        assert task["func"] == REPLAY_TASK and task["args"] == (instance.pk,)
        assert marker not in repr(task)
    assert all(marker.encode() not in row.payload.encode() for row in OrmQ.objects.all())
    OrmQ.objects.all().delete()


# No secret in the logs.


def test_no_secret_reaches_the_logs(workflows_env, settings, caplog):
    caplog.set_level(logging.DEBUG)
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"approval": SECRET}}
    waiting(workflows_env, "a1")
    user = user_with(superuser=True, username="root")
    user.set_password("pa55-w0rd-not-for-logs")
    user.save()
    token = Token.objects.create(user=user).key
    secrets = [SECRET, token, "pa55-w0rd-not-for-logs"]
    url = "/workflows/approval/instances/a1/webhooks/manager-approval/"

    def webhook(signature, body=BODY):
        secrets.append(signature)
        secrets.append(signature.split("v1=")[-1])
        return APIClient().post(url, body, content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=signature)

    assert webhook(sign("wrong-secret", BODY)).status_code == 401
    assert webhook(sign(SECRET, b'{"outcome": "rejected"}')).status_code == 401
    assert webhook(sign(SECRET, BODY, timestamp=int(time.time()) - 999)).status_code == 401
    good = sign(SECRET, BODY)
    assert webhook(good).status_code == 202
    assert webhook(good).status_code == 409
    workflows_env.run_until_idle()

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/workflows/approval/instances/a1/").status_code == 200
    assert api.post("/workflows/approval/instances/", {"instance_id": "-bad"}, format="json").status_code == 400
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION=f"Token {token[:-1]}x")
    secrets.append(f"{token[:-1]}x")
    assert bad.get("/workflows/").status_code == 401
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION="Basic cm9vdDpwYTU1LXcwcmQtbm90LWZvci1sb2dz")  # root:pa55-...
    assert basic.get("/workflows/").status_code == 401  # Basic is not among the defaults
    assert Client().post("/admin/login/", {"username": "root", "password": "pa55-w0rd-not-for-logs"}
                         ).status_code in (200, 302)

    assert caplog.records, "nothing was logged: the capture is not working"
    logged = "\n".join(
        f"{record.name} {record.getMessage()} {record.exc_text or ''} {getattr(record, 'request', '')!r}"
        for record in caplog.records
    ) + caplog.text
    for secret in secrets:
        assert secret not in logged, secret


# The admin's query strings and addresses are input too.

ADMIN_QUERIES = ["q=%00", "q=" + "x" * 5000, f"q={SCRIPT}", "workflow=%00", f"workflow={SCRIPT}", "status__exact=%00",
                 "status__exact=nonsense", "created_at__gte=yesterday", "created_at__gte=%00", "o=99", "o=%00",
                 "p=99999999999999999999", "p=-1", "all=", "e=1", "_changelist_filters=%00", "steps_page=%00"]


@pytest.mark.parametrize("query", ADMIN_QUERIES)
def test_hostile_admin_query_strings_never_fail_the_page(workflows_env, query):
    client = Client()
    client.force_login(user_with(superuser=True, username="root"))
    instance = waiting(workflows_env)
    for url in (reverse("admin:django_workflows_instance_changelist"),
                reverse("admin:django_workflows_instance_approvals"),
                reverse("admin:django_workflows_instance_change", args=[instance.pk])):
        response = client.get(f"{url}?{query}")
        assert response.status_code in (200, 302, 400, 404), (url, query, response.status_code)
        assert_escaped(response.content.decode(), (url, query))


@pytest.mark.parametrize("object_id", ["99999999999999999999999", "-1", "abc", "%00", "1%2F..%2F2", SCRIPT])
def test_hostile_admin_addresses_are_404(workflows_env, object_id):
    client = Client()
    client.force_login(user_with(superuser=True, username="root"))
    waiting(workflows_env)
    before = state()
    base = "/admin/django_workflows/instance"
    for method, url in [("get", f"{base}/{object_id}/change/"), ("get", f"{base}/{object_id}/history/"),
                        ("post", f"{base}/{object_id}/steer/pause/"), ("post", f"{base}/{object_id}/decide/"),
                        ("post", f"{base}/{object_id}/send-event/"), ("get", f"{base}/workflow/{object_id}/")]:
        response = getattr(client, method)(url, {"outcome": "approved", "step": "approval-1", "type": "go"}
                                           if method == "post" else {})
        assert response.status_code in (302, 404), (url, response.status_code)
        assert_escaped(response.content.decode(), url)
    assert state() == before
