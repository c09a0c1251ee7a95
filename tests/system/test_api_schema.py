"""The OpenAPI schema: served, valid, and honoured by the live server under schemathesis."""

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from drf_spectacular.validation import validate_schema
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows

# CI's Django 6 pass runs this file: Django parses the requests schemathesis makes up before the API does.
pytestmark = pytest.mark.django_version

OPERATIONS = {
    "GET /workflows/", "GET /workflows/{name}/", "GET /workflows/{name}/instances/",
    "POST /workflows/{name}/instances/", "POST /workflows/{name}/instances/batch/",
    "POST /workflows/{name}/instances/bulk/", "GET /workflows/{name}/instances/{instance_id}/values/{sha256}/",
    "GET /workflows/{name}/instances/{instance_id}/", "PATCH /workflows/{name}/instances/{instance_id}/status/",
    "POST /workflows/{name}/instances/{instance_id}/events/{event_type}/",
    "POST /workflows/{name}/instances/{instance_id}/webhooks/{event_type}/",
    # The Refund workflow's declared events, each with its payload's schema.
    "POST /workflows/refund/instances/{instance_id}/events/manager-approval/",
    "POST /workflows/refund/instances/{instance_id}/events/note/",
    "POST /workflows/refund/instances/{instance_id}/webhooks/refund-settled/",
}


@pytest.fixture
def admin_client_api(db):
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_schema_is_served_and_valid(admin_client_api):
    response = admin_client_api.get("/workflows/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    validate_schema(schema)  # raises on an invalid OpenAPI 3 document
    operations = {op["operationId"] for path in schema["paths"].values() for op in path.values()
                  if isinstance(op, dict) and "operationId" in op}
    assert operations >= {"workflows_list", "workflows_retrieve", "instances_list", "instances_create",
                          "instances_batch", "instances_retrieve", "instances_change_status",
                          "instances_send_event", "instances_webhook"}


@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(live_server, tmp_path, settings):
    """Valid and invalid inputs (schemathesis's "all" mode: negative cases break every constraint of
    the schema) against every operation: no 500, every response as the schema says, every error the
    JSON error shape, and inputs that break the schema refused."""
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.inline.InlineExecutor",
                                 "WEBHOOK_SECRETS": {"approval": "s3cret", "refund": "s3cret"}}
    user = User.objects.create_superuser("fuzzer", "f@example.com", "pw")
    token = Token.objects.create(user=user)
    for n in range(3):
        workflows.get("approval").create(id=f"a{n}", params={})
        workflows.get("three-steps").create(id=f"t{n}", params={})
        # The same ids as approval's: the hooks' known instance then exists for the refund operations too,
        # whose workflow is in their path, so that they get past the 404 (and refund-settled, signed with
        # refund's secret, past the 401) into the payload's validation.
        workflows.get("refund").create(id=f"a{n}", params={})
    report = tmp_path / "schemathesis.json"
    inputs = tmp_path / "inputs.ndjson"
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "DW_FUZZ_LOG": str(inputs),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                          os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "schemathesis"), "run", f"{live_server.url}/workflows/schema/",
         "--url", live_server.url, "-H", f"Authorization: Token {token.key}",
         "--checks", "not_a_server_error,response_schema_conformance,status_code_conformance,"
                     "content_type_conformance,negative_data_rejection,error_is_the_api_error_shape,"
                     "record_the_input",
         "--mode", "all", "--max-examples", "40", "--seed", "1", "--workers", "1",
         "--phases", "examples,coverage,fuzzing", "--continue-on-failure",
         "--report", "junit", "--report-junit-path", str(report), "--no-color",
         "--generation-codec", "utf-8", "--request-timeout", "10",
         # A stream of server-sent events lasts until its instance ends (the known instance waits for days):
         # its answers are tested in tests/integration/test_progress_api.py and in Chromium.
         "--exclude-path-regex", "/stream/$"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    summary = result.stdout[-6000:]
    print(summary)
    tests = re.search(r'tests="(\d+)"', report.read_text()) if report.exists() else None
    assert result.returncode == 0, summary + result.stderr[-2000:]
    assert tests and int(tests.group(1)) >= 9

    tried = [json.loads(line) for line in inputs.read_text().splitlines()]
    per_operation = Counter(line["operation"] for line in tried)
    per_mode = Counter(line["mode"] for line in tried)
    print(f"schemathesis: {len(tried)} inputs tried against {len(per_operation)} operations "
          f"({per_mode['negative']} invalid, {per_mode['positive']} valid); statuses "
          f"{dict(sorted(Counter(line['status'] for line in tried).items()))}")
    assert set(per_operation) == OPERATIONS
    assert all(line["status"] < 500 for line in tried)
    for operation in OPERATIONS:
        modes = {line["mode"] for line in tried if line["operation"] == operation}
        assert "negative" in modes, operation
    # Past authentication into every declared event's operation: some inputs reach its validation.
    for operation in (op for op in OPERATIONS if op.startswith("POST /workflows/refund/")):
        statuses = {line["status"] for line in tried if line["operation"] == operation}
        assert statuses - {401, 404}, (operation, statuses)


def test_the_schema_is_titled_versioned_and_describes_this_api_alone(admin_client_api):
    import django_workflows

    response = admin_client_api.get("/workflows/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["info"]["title"] == "django-workflows API"
    assert schema["info"]["version"] == django_workflows.__version__
    assert all(path.startswith("/workflows/") for path in schema["paths"])
    assert "/workflows/schema/" not in schema["paths"]
    assert response["Content-Disposition"] == 'inline; filename="django-workflows API.json"'


def test_swagger_ui_shows_the_schema_from_a_cdn_or_from_the_sidecar(client, db, settings):
    from django.contrib.staticfiles import finders
    from django.test import modify_settings

    page = client.get("/workflows/schema/ui/").content.decode()
    assert "<title>django-workflows API " in page and 'data-schema-url="/workflows/schema/"' in page
    assert 'src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.33.1/swagger-ui-bundle.js" integrity="sha384-' in page

    with modify_settings(INSTALLED_APPS={"append": "drf_spectacular_sidecar"}):
        page = client.get("/workflows/schema/ui/").content.decode()
        assert 'src="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"' in page
        assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
