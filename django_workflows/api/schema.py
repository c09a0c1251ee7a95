"""The API's OpenAPI schema and a page that shows it (Swagger UI), both drawn by drf-spectacular.

The schema describes this API alone, under whatever prefix the project mounted it, titled and
versioned, whatever other DRF views the project serves and whatever its ``REST_FRAMEWORK`` says.
"""

from __future__ import annotations

from django.apps import apps
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import include, path, reverse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView

import django_workflows

TITLE = "django-workflows API"
# Swagger UI's files, for the browser to load: from the project's static files when
# drf-spectacular-sidecar is installed, from a CDN otherwise (the server itself fetches nothing).
SWAGGER_UI_CDN = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5"
SCHEMA_SETTINGS = {
    "TITLE": TITLE,
    "VERSION": django_workflows.__version__,
    "DESCRIPTION": "Create, inspect and steer workflow instances, send them events, and deliver signed "
                   "webhooks. Errors are JSON: {\"error\": {\"code\", \"message\"}}.",
}


def operation(**kwargs):
    """drf-spectacular's ``extend_schema`` for a view method, built on drf-spectacular's ``AutoSchema``.

    ``extend_schema`` otherwise extends the class named by ``REST_FRAMEWORK['DEFAULT_SCHEMA_CLASS']``,
    which a project need not set for the API's schema to be drawn.
    """
    def decorator(method):
        method.schema = AutoSchema
        return extend_schema(**kwargs)(method)

    return decorator


class SchemaView(SpectacularAPIView):
    """``GET schema/``: the OpenAPI 3 document, YAML or JSON by the Accept header."""

    schema = AutoSchema()
    custom_settings = SCHEMA_SETTINGS
    operations: list = []  # the URL patterns it describes, given by urls.py

    @operation(exclude=True)
    def get(self, request, *args, **kwargs):
        # Only this API's URLs, mounted where the project mounted them (the route matched up to schema/).
        match = request.resolver_match
        self.patterns = [path(match.route.removesuffix("schema/"), include((self.operations, match.app_name)))]
        return super().get(request, *args, **kwargs)


def schema_ui(request):
    """``GET schema/ui/``: Swagger UI on the schema, to read the API and try it with your session."""
    if apps.is_installed("drf_spectacular_sidecar"):
        assets = static("drf_spectacular_sidecar/swagger-ui-dist")
    else:
        assets = SWAGGER_UI_CDN
    return render(request, "django_workflows/api/schema_ui.html", {
        "title": f"{TITLE} {django_workflows.__version__}",
        "assets": assets,
        "schema_url": reverse(f"{request.resolver_match.namespace}:schema"),
        "csrf_token": get_token(request),
    })
