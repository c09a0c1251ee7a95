"""Safe defaults and checked settings: the webhook secrets' system check, what a client is told about
what exists, the Swagger UI page's files, the admin's restart count and tracebacks, and the example
project's settings."""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.surfaces import checks
from django_workflows.models import Event, Instance
from django_workflows.webhooks import sign


def ids(messages):
    return sorted(message.id for message in messages)


@pytest.mark.parametrize("secret, expected", [
    (b"a-bytes-secret-of-enough-length", []),
    ("whsec_0123456789abcdef", []),
    (12345678901234567890, ["django_workflows.E029"]),
    ("", ["django_workflows.E029"]),
    ("x", ["django_workflows.W113"]),
])
def test_each_webhook_secret_is_checked_for_its_type_and_length(settings, secret, expected):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": secret}}
    assert ids(checks.check_webhook_secrets()) == expected


def test_the_check_names_an_unknown_workflow_and_a_webhook_workflow_without_a_secret(settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refnud": "whsec_0123456789abcdef"}}
    messages = checks.check_webhook_secrets()
    assert ids(messages) == ["django_workflows.W111", "django_workflows.W112"]
    assert "'refnud', which no workflow is called" in messages[0].msg
    assert "'refund' declares webhook event types ['refund-settled']" in messages[1].msg


def test_webhook_secrets_must_be_a_dict(settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": ["whsec_0123456789abcdef"]}
    assert ids(checks.check_webhook_secrets()) == ["django_workflows.E028"]


@pytest.mark.parametrize("secret", [12345678901234567890, None, ""])
def test_a_delivery_to_a_workflow_with_an_unusable_secret_is_refused_as_unsigned_not_a_server_error(
        settings, workflows_env, caplog, secret):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": secret}}
    workflows.get("refund").create(id="r1", params={})
    workflows_env.run_until_idle()
    body = json.dumps({"refund": "re_1"}).encode()
    with caplog.at_level(logging.ERROR, logger="django_workflows.webhooks"):
        response = APIClient().post("/workflows/refund/instances/r1/webhooks/refund-settled/", body,
                                    content_type="application/json",
                                    HTTP_X_WORKFLOWS_SIGNATURE=sign("anything-at-all-16+", body))
    assert response.status_code == 401, response.content
    assert response.json()["error"]["code"] == "bad_signature"
    assert "WEBHOOK_SECRETS" not in response.content.decode()
    if secret is not None:
        assert "WEBHOOK_SECRETS']['refund']" in caplog.text


def test_a_bytes_secret_signs_and_verifies(settings, workflows_env):
    secret = b"whsec_bytes_0123456789"
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"refund": secret}}
    instance = workflows.get("refund").create(id="r2", params={})
    workflows_env.run_until_idle()
    body = json.dumps({"refund": "re_1", "amount": 120}).encode()
    response = APIClient().post("/workflows/refund/instances/r2/webhooks/refund-settled/", body,
                                content_type="application/json", HTTP_X_WORKFLOWS_SIGNATURE=sign(secret, body))
    assert response.status_code == 202, response.content
    assert Event.objects.filter(instance_id=instance.pk, type="refund-settled").count() == 1


def test_an_unknown_workflow_s_answers_never_list_the_workflows_that_exist(admin_user, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"nope": "whsec_0123456789abcdef"}}
    client = APIClient()
    client.force_authenticate(admin_user)
    answers = [client.get("/workflows/nope/instances/"), client.get("/workflows/nope/"),
               APIClient().post("/workflows/nope/instances/x/webhooks/paid/", b"{}", content_type="application/json",
                                HTTP_X_WORKFLOWS_SIGNATURE=sign("whsec_0123456789abcdef", b"{}"))]
    for response in answers:
        text = response.content.decode()
        assert response.status_code in (401, 404), text
        assert "Known workflows" not in text and "three-steps" not in text and "approval" not in text


def test_swagger_ui_from_a_cdn_is_pinned_and_integrity_checked(admin_client, settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "drf_spectacular_sidecar"]
    html = admin_client.get("/workflows/schema/ui/").content.decode()
    tags = re.findall(r"<(?:script|link)[^>]*swagger-ui[^>]*>", html)
    assert len(tags) == 2, html
    for tag in tags:
        assert "swagger-ui-dist@5.33.1/" in tag
        assert re.search(r'integrity="sha384-[A-Za-z0-9+/=]{64}"', tag) and 'crossorigin="anonymous"' in tag


def test_the_admin_s_restart_count_refuses_a_digit_that_is_not_a_number(admin_client, workflows_env):
    instance = workflows.get("three-steps").create()
    workflows_env.run_until_idle()
    before = Instance.objects.values("status", "updated_at").get(pk=instance.pk)
    url = reverse("admin:django_workflows_instance_steer", args=[instance.pk, "restart"])
    for count in ("²", "٣x", "-1"):
        response = admin_client.post(url, {"from_step": "step-one", "count": count}, follow=True)
        assert response.status_code == 200
        shown = [str(message) for message in response.context["messages"]]
        assert any("count must be a whole number" in message for message in shown), shown
    assert Instance.objects.values("status", "updated_at").get(pk=instance.pk) == before


def test_tracebacks_are_shown_to_superusers_only(admin_client, workflows_env):
    instance = workflows.get("uncaught").create()
    workflows_env.run_until_idle()
    url = reverse("admin:django_workflows_instance_change", args=[instance.pk])
    assert "Traceback (most recent call last)" in admin_client.get(url).content.decode()

    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="django_workflows",
                                                         codename="view_instance"))
    client = Client()
    client.force_login(staff)
    page = client.get(url).content.decode()
    assert "Traceback (most recent call last)" not in page and ".py" not in page.split("dw-traceback")[-1][:500]
    assert "shown to superusers only" in page


def test_the_example_project_is_safe_by_default(monkeypatch, tmp_path):
    example = example_settings(monkeypatch)

    assert example.DEBUG is False
    assert "*" not in example.ALLOWED_HOSTS
    assert example.SECRET_KEY not in ("example-project-not-secret", "") and len(example.SECRET_KEY) >= 50
    assert "django.middleware.security.SecurityMiddleware" == example.MIDDLEWARE[0]
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" in example.MIDDLEWARE
    secret = example.DJANGO_WORKFLOWS["WEBHOOK_SECRETS"]["payment-race"]
    assert secret != "demo-webhook-secret" and len(secret) == 64


def test_processes_starting_at_once_share_one_whole_secret_key(monkeypatch, tmp_path):
    """The example project makes its key on its first run: processes starting at once (the demo's web
    server and worker, two test passes) each read the one key kept, never an empty file being written."""
    import threading

    example = example_settings(monkeypatch)

    for round_ in range(100):
        monkeypatch.setattr(example, "BASE_DIR", tmp_path / str(round_))
        (tmp_path / str(round_)).mkdir()
        start, keys = threading.Barrier(6), []

        def first_run():
            start.wait()
            keys.append(example._secret_key())

        threads = [threading.Thread(target=first_run) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(keys)) == 1 and len(keys[0]) >= 50, (round_, keys)
        assert [path.name for path in (tmp_path / str(round_)).iterdir()] == [".secret_key"]


def example_settings(monkeypatch):
    """The example project's settings module, imported afresh with none of its environment variables set,
    and forgotten again after the test."""
    for name in ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "PAYMENT_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(settings_dir()))
    sys.modules.pop("example_project.settings", None)
    example = importlib.import_module("example_project.settings")
    monkeypatch.delitem(sys.modules, "example_project.settings")
    return example


def settings_dir():
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "example_project"


@pytest.mark.parametrize("body", [b"\n", b"   ", b"\t\r\n"])
def test_a_body_of_whitespace_is_not_json_and_creates_nothing(admin_user, workflows_env, body):
    client = APIClient()
    client.force_authenticate(admin_user)
    response = client.post("/workflows/three-steps/instances/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "malformed_json"
    assert not Instance.objects.exists()
