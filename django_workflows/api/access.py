"""Who may call the API: its authentication, its refusals and its error responses, shared by the
operations and the schema that describes them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.authentication import BasicAuthentication
from rest_framework.exceptions import NotAuthenticated

from django_workflows.api import exceptions
from django_workflows.foundations.conf import workflow_settings


def default_authenticators() -> list[type]:
    # Session and token only. Basic authentication is not among them: a browser replays cached Basic
    # credentials on a cross-site request, and DRF checks CSRF for sessions alone.
    from django.apps import apps
    from rest_framework.authentication import SessionAuthentication

    classes: list[type] = [SessionAuthentication]
    if apps.is_installed("rest_framework.authtoken"):
        from rest_framework.authentication import TokenAuthentication

        # First, so that a 401 names its scheme in WWW-Authenticate.
        classes.insert(0, TokenAuthentication)
    return classes


# The views APIAccess is mixed into, for the type checker; object at run time, where they give the order.
if TYPE_CHECKING:
    from rest_framework.views import APIView as _View
else:
    _View = object


class APIAccess(_View):
    """A mixin for DRF views: the API's authenticators, its 401s and its JSON errors."""

    def get_authenticators(self):
        if workflow_settings.API_AUTHENTICATION_CLASSES is None:
            classes = default_authenticators()
        else:
            classes = workflow_settings.import_strings("API_AUTHENTICATION_CLASSES")
        return [cls() for cls in classes]

    def permission_denied(self, request, message=None, code=None):
        # A client that sent credentials this API does not read would otherwise be told that it sent none.
        scheme = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")[0]
        if scheme and request.successful_authenticator is None:
            accepted = {getattr(a, "keyword", "").lower() for a in request.authenticators}
            accepted |= {"basic" for a in request.authenticators if isinstance(a, BasicAuthentication)}
            if scheme.lower() not in accepted:
                hint = (" Add 'rest_framework.authtoken' to INSTALLED_APPS and migrate, or set "
                        "DJANGO_WORKFLOWS['API_AUTHENTICATION_CLASSES']." if scheme.lower() == "token" else
                        " Set DJANGO_WORKFLOWS['API_AUTHENTICATION_CLASSES'] to a class that reads it.")
                raise NotAuthenticated(f"This API does not accept {scheme!r} credentials.{hint}")
        super().permission_denied(request, message=message, code=code)

    def get_exception_handler(self):
        return exceptions.exception_handler

    def get_authenticate_header(self, request):
        # A 401 needs a WWW-Authenticate header. Not Basic when no authenticator names one: a browser
        # would prompt for credentials this API does not take.
        return super().get_authenticate_header(request) or 'Session realm="api"'
