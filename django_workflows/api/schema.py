"""The API's OpenAPI schema and a page that shows it (Swagger UI), both drawn by drf-spectacular.

The schema describes this API alone, under whatever prefix the project mounted it, titled and
versioned, whatever other DRF views the project serves and whatever its ``REST_FRAMEWORK`` says.
"""

from __future__ import annotations

import copy
import re

from django.apps import apps
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import include, path, reverse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer

import django_workflows
from django_workflows.api.access import APIAccess
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import registry
from django_workflows.shared.options import WorkflowOptions

TITLE = "django-workflows API"
# Swagger UI's files, for the browser to load: from the project's static files when
# drf-spectacular-sidecar is installed (the [api] extra installs it), otherwise from a CDN, pinned to one
# release and checked by the browser against these digests (Subresource Integrity): the page runs on the
# admin's origin with the session and the CSRF token in reach, so a changed file must not run. A new
# release means new digests: `openssl dgst -sha384 -binary <file> | openssl base64 -A` of the npm
# package's files (the sidecar ships the same bytes).
SWAGGER_UI_CDN = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.33.1"
SWAGGER_UI_INTEGRITY = {
    "css": "sha384-Ov4/wv3j2bmct8cDc5X4ngJZohVPzEmc6uDPH8WeljUxO5vtoykvMEfbu9Vh6RaW",
    "js": "sha384-ZPehFMQommnnuaZ4rpxgkgTT2DKFVp4hZC/7pLit+9Lek9T1YGSo23eHFbvNkXkw",
}
SCHEMA_SETTINGS = {
    "TITLE": TITLE,
    "VERSION": django_workflows.__version__,
    "DESCRIPTION": "Create, inspect and steer workflow instances, send them events, and deliver signed "
                   "webhooks. Errors are JSON: {\"error\": {\"code\", \"message\"}}.",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "django_workflows.api.schema.declared_event_operations"],
}


def declared_event_operations(result, generator, request, public):
    """An operation for each event type a workflow declares, with its payload's schema: the generic
    ``events/{event_type}/`` operation cannot say what each type's payload must be. A webhook-only
    type is described at the webhook endpoint, the others at the event endpoint."""
    paths = result.get("paths", {})
    generic = {kind: next((p for p in paths if p.endswith(f"/{kind}/{{event_type}}/")), None)
               for kind in ("events", "webhooks")}
    for name in registry.names():
        for rule in (WorkflowOptions.of(registry.get(name)).events or {}).values():
            template = generic["webhooks" if rule.webhook else "events"]
            if template is None or "post" not in paths[template]:
                continue
            operation = copy.deepcopy(paths[template]["post"])
            operation["operationId"] = "_".join(
                [operation["operationId"], *(re.sub(r"[^A-Za-z0-9]", "_", part) for part in (name, rule.type))])
            operation["parameters"] = [parameter for parameter in operation.get("parameters", [])
                                       if parameter.get("name") not in ("name", "event_type")]
            operation["summary"] = f"Send event {rule.type!r} to an instance of workflow {name!r}"
            operation["requestBody"] = {
                "content": {"application/json": {"schema": _payload_schema(rule, result)}},
                "required": False,
            }
            concrete = template.replace("{name}", name).replace("{event_type}", rule.type)
            paths[concrete] = {"post": operation}
    return result


def _payload_schema(rule, result) -> dict:
    """The schema of the type's payload; a Pydantic model's with its nested models among the document's
    components, where the references of an OpenAPI document point (a JSON Schema's ``$defs`` do not)."""
    if rule.model is None:
        return rule.schema if rule.schema is not None else {}
    schema = rule.model.model_json_schema(ref_template="#/components/schemas/{model}")
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.update(schema.pop("$defs", {}))
    return schema


def operation(**kwargs):
    """drf-spectacular's ``extend_schema`` for a view method, built on drf-spectacular's ``AutoSchema``.

    ``extend_schema`` otherwise extends the class named by ``REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS']``,
    which a project need not set for the API's schema to be drawn.
    """
    def decorator(method):
        method.schema = AutoSchema
        return extend_schema(**kwargs)(method)

    return decorator


class SchemaView(APIAccess, SpectacularAPIView):
    """``GET schema/``: the OpenAPI 3 document, YAML or JSON by the Accept header.

    It names every workflow and what each accepts, so it asks what the API's reads ask (view_instance),
    unless ``API_SCHEMA_PUBLIC`` opens it."""

    schema = AutoSchema()
    custom_settings = SCHEMA_SETTINGS
    operations: list = []  # the URL patterns it describes, given by urls.py

    def get_permissions(self):
        from django_workflows.api.permissions import WorkflowModelPermissions

        return [AllowAny() if workflow_settings.API_SCHEMA_PUBLIC else WorkflowModelPermissions()]

    def handle_exception(self, exc):
        # An error is the API's JSON error, whatever document format the client asked for.
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), "application/json"
        return super().handle_exception(exc)

    @operation(exclude=True)
    def get(self, request, *args, **kwargs):
        # Only this API's URLs, mounted where the project mounted them (the route matched up to schema/).
        match = request.resolver_match
        self.patterns = [path(match.route.removesuffix("schema/"), include((self.operations, match.app_name)))]
        return super().get(request, *args, **kwargs)


def schema_ui(request):
    """``GET schema/ui/``: Swagger UI on the schema, to read the API and try it with your session."""
    if apps.is_installed("drf_spectacular_sidecar"):
        assets, integrity = static("drf_spectacular_sidecar/swagger-ui-dist"), None
    else:
        assets, integrity = SWAGGER_UI_CDN, SWAGGER_UI_INTEGRITY
    return render(request, "django_workflows/api/schema_ui.html", {
        "title": f"{TITLE} {django_workflows.__version__}",
        "assets": assets,
        "integrity": integrity,
        "schema_url": reverse(f"{request.resolver_match.namespace}:schema"),
        "csrf_token": get_token(request),
    })
