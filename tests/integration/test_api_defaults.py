"""The API's defaults against a hostile page and an unauthenticated prober: no Basic authentication
(which browsers replay cross-site, unchecked for CSRF), the content type required on every write,
a schema that needs view_instance, and webhook errors that reveal nothing."""

from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.models import Event
from django_workflows.webhooks import sign


@pytest.fixture
def waiting(workflows_env):
    workflows.get("awaiter").create(id="a1")
    workflows_env.run_until_idle()
    return User.objects.create_superuser("admin", "admin@example.com", "pw")


def basic(username="admin", password="pw") -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def test_basic_credentials_a_browser_replays_cross_site_are_not_accepted(waiting):
    # What a hostile page's form makes a browser send: cached Basic credentials, text/plain, no token.
    response = Client().post("/workflows/awaiter/instances/a1/events/go/", "", content_type="text/plain",
                             HTTP_AUTHORIZATION=basic(), HTTP_ORIGIN="https://evil.example")
    assert response.status_code in (401, 403), response.content
    assert Event.objects.count() == 0


def test_a_session_write_without_the_csrf_token_is_refused(waiting):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(waiting)
    response = browser.post("/workflows/awaiter/instances/a1/events/go/", "{}", content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert Event.objects.count() == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_an_empty_write_must_still_say_it_is_json(waiting, content_type):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=waiting).key}")
    response = client.post("/workflows/awaiter/instances/a1/events/go/", b"", content_type=content_type)
    assert response.status_code == 415, response.content
    assert response.json()["error"]["code"] == "unsupported_media_type"
    created = client.post("/workflows/awaiter/instances/", b"", content_type=content_type)
    assert created.status_code == 415
    assert Event.objects.count() == 0
    # With the JSON content type, an empty body is still a null payload / a default instance.
    assert client.post("/workflows/awaiter/instances/a1/events/go/", b"",
                       content_type="application/json").status_code == 202


def test_the_schema_needs_view_instance_unless_a_setting_opens_it(waiting, settings):
    anonymous = APIClient().get("/workflows/schema/")
    assert anonymous.status_code in (401, 403), anonymous.content[:200]
    assert b"awaiter" not in anonymous.content
    viewer = User.objects.create_user("viewer", password="pw")
    viewer.user_permissions.set(Permission.objects.filter(codename="view_instance"))
    client = APIClient()
    client.force_authenticate(viewer)
    assert client.get("/workflows/schema/").status_code == 200
    settings.DJANGO_WORKFLOWS = {"API_SCHEMA_PUBLIC": True}
    assert APIClient().get("/workflows/schema/").status_code == 200


def test_a_webhook_prober_learns_neither_which_workflows_exist_nor_which_take_webhooks(waiting, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"awaiter": "whsec"}}
    body = b'{"x": 1}'
    answers = {}
    for workflow in ("awaiter", "approval", "no-such-workflow"):  # a secret, none, no workflow at all
        response = APIClient().post(f"/workflows/{workflow}/instances/a1/webhooks/go/", body,
                                    content_type="application/json",
                                    HTTP_X_WORKFLOWS_SIGNATURE=sign("guessed", body))
        answers[workflow] = (response.status_code, json.dumps(response.json()))
    assert len(set(answers.values())) == 1, answers
    status, text = answers["awaiter"]
    assert status == 401 and "approval" not in text and "WEBHOOK_SECRETS" not in text
    assert Event.objects.count() == 0


def test_unauthenticated_api_errors_name_no_workflow(waiting):
    for path in ("/workflows/no-such-workflow/", "/workflows/awaiter/instances/zz/"):
        response = APIClient().get(path)
        assert response.status_code in (401, 403)
        assert "awaiter" not in response.content.decode() and "three-steps" not in response.content.decode()


def test_the_api_imports_its_permission_and_authentication_classes_once_not_per_request(waiting, settings,
                                                                                      monkeypatch):
    from django_workflows.foundations import conf

    imported = []
    real_import_string = conf.import_string
    monkeypatch.setattr(conf, "import_string", lambda path: imported.append(path) or real_import_string(path))
    settings.DJANGO_WORKFLOWS = {"API_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication"]}
    client = APIClient()
    client.force_login(waiting)
    for _ in range(3):
        assert client.get("/workflows/awaiter/instances/").status_code == 200
    assert sorted(imported) == sorted([
        "rest_framework.authentication.SessionAuthentication",
        "django_workflows.api.permissions.WorkflowModelPermissions",
    ])
    settings.DJANGO_WORKFLOWS = {"API_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"]}
    assert client.get("/workflows/awaiter/instances/").status_code == 200
    assert imported[-1] == "rest_framework.permissions.IsAdminUser"
