"""The REST API (the package's ``api`` extra: Django REST framework and drf-spectacular)."""

from django_workflows.errors import require_extra

require_extra("rest_framework", "api", "The workflows API (django_workflows.api)")
require_extra("drf_spectacular", "api", "The workflows API's schema (django_workflows.api)")
