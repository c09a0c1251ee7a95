"""API errors: JSON ``{"error": {"code", "message"}}`` with a stable code, never a traceback."""

from __future__ import annotations

from django.db import DatabaseError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from django_workflows import errors


class WorkflowAPIError(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"
    default_detail = "The request is not valid."

    def __init__(self, detail=None, code=None):
        super().__init__(detail or self.default_detail, code or self.default_code)


class NotFound(WorkflowAPIError):
    status_code, default_code = status.HTTP_404_NOT_FOUND, "not_found"


class PayloadTooLarge(WorkflowAPIError):
    status_code, default_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, "payload_too_large"


class MalformedJSON(WorkflowAPIError):
    status_code, default_code = status.HTTP_400_BAD_REQUEST, "malformed_json"


class UnsupportedMediaType(WorkflowAPIError):
    status_code, default_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"


class DatabaseUnavailable(WorkflowAPIError):
    status_code, default_code = status.HTTP_503_SERVICE_UNAVAILABLE, "database_unavailable"


class BadSignature(WorkflowAPIError):
    status_code, default_code = status.HTTP_401_UNAUTHORIZED, "bad_signature"


def from_engine(exc: errors.WorkflowError) -> WorkflowAPIError:
    """The API error for an engine error: its class's code and status, and the engine's message, which
    says what to do (less what the class keeps from clients: ``public_message``)."""
    api_error = WorkflowAPIError(exc.public_message, exc.code)
    api_error.status_code = exc.http_status
    return api_error


def _code(detail) -> str:
    if isinstance(detail, dict):
        detail = next(iter(detail.values()), "invalid")
    if isinstance(detail, list):
        detail = detail[0] if detail else "invalid"
    return getattr(detail, "code", None) or "invalid"


def exception_handler(exc, context):
    if isinstance(exc, errors.WorkflowError):
        exc = from_engine(exc)
    elif isinstance(exc, Http404):
        exc = NotFound(str(exc) or "Not found.")
    elif isinstance(exc, exceptions.ParseError):
        exc = MalformedJSON(f"The request body is not valid JSON: {exc.detail}")
    elif isinstance(exc, exceptions.UnsupportedMediaType):
        exc = UnsupportedMediaType(f"{exc.detail} Send the body as application/json.")
    elif isinstance(exc, DatabaseError):
        # A restart or failover, not the request's fault: the transaction is rolled back (the handler
        # marks it so), so the same request may be sent again.
        exc = DatabaseUnavailable(f"The database did not answer ({type(exc).__name__}); nothing was "
                                  "changed. Try again in a few seconds.")
    response = drf_exception_handler(exc, context)
    if isinstance(exc, DatabaseUnavailable) and response is not None:
        response["Retry-After"] = "5"
    if response is None:
        return None
    detail = response.data
    if isinstance(exc, exceptions.ValidationError):
        body = {"code": _code(exc.detail) if _code(exc.detail) != "invalid" else "invalid",
                "message": "The request is not valid; see fields.", "fields": detail}
    else:
        message = detail.get("detail", detail) if isinstance(detail, dict) else detail
        body = {"code": exc.get_codes() if isinstance(exc.get_codes(), str) else "invalid", "message": str(message)}
    return Response({"error": _encodable(body)}, status=response.status_code, headers=dict(response.items()))


def _encodable(value):
    """The error body with any lone surrogate escaped: an error may quote the input back ('"\\ud800" is
    not a valid choice'), and UTF-8 cannot encode half of a UTF-16 pair."""
    if isinstance(value, dict):
        return {_encodable(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value
