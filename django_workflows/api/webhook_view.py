"""The webhook endpoint: events from providers that sign the body instead of authenticating
(``django_workflows.webhooks`` says how), sent through the same path as the API's events."""

from __future__ import annotations

import secrets

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiParameter
from rest_framework.permissions import AllowAny

from django_workflows.shared import audit, declared_events
from django_workflows.api import exceptions
from django_workflows.api import serializers as s
from django_workflows.api.schema import operation
from django_workflows.api.views import IDEMPOTENCY_PARAMETER, InstanceEventView, errors, idempotency_key
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.webhook_secrets import secret_for
from django_workflows.webhooks import SIGNATURE_HEADER, SOURCE_HEADER, SignatureError, delivery_id, verify

_UNGUESSABLE_SECRET = secrets.token_hex(32)


class WebhookView(InstanceEventView):
    """Events from senders that sign the body instead of authenticating (see django_workflows.webhooks)."""

    authentication_classes: list = []
    channel = declared_events.WEBHOOK

    def sending_user(self, request):
        return None

    def acting_user(self):
        return None  # the signature, checked first, is the authority

    def get_authenticators(self):
        return []

    def get_permissions(self):
        return [AllowAny()]

    def sender(self, request) -> str:
        # Printable characters only: the header is anyone's text, and PostgreSQL refuses NUL.
        source = "".join(c for c in request.headers.get(SOURCE_HEADER, "")[:100] if c.isprintable())
        return audit.sender("webhook", f"{source or 'unnamed'}@{request.META.get('REMOTE_ADDR', '?')}")

    @operation(operation_id="instances_webhook", request={"application/json": {}}, auth=[],
                   parameters=[OpenApiParameter(SIGNATURE_HEADER, str, OpenApiParameter.HEADER, required=True,
                                                description="t=<unix time>,v1=<hex HMAC-SHA256 of 't.body', or "
                                                            "of 't.key.body' with an Idempotency-Key>"),
                               IDEMPOTENCY_PARAMETER],
                   responses={202: s.EventAcceptedSerializer, **errors(400, 401, 403, 404, 409, 413, 415, 429)})
    def post(self, request, name, instance_id, event_type):
        # A workflow without a secret (or no workflow at all) answers as a wrong signature does, so an
        # unauthenticated sender learns neither which workflows exist nor which take webhooks.
        # A secret that cannot be used (not text, or empty) counts as none: logged, not shown.
        secret = secret_for(name) or _UNGUESSABLE_SECRET
        try:
            body = request.body
        except RequestDataTooBig:
            raise exceptions.PayloadTooLarge("The request body is over the server's upload limit.") from None
        try:
            digest = verify(secret, body, request.headers.get(SIGNATURE_HEADER),
                            workflow_settings.WEBHOOK_TOLERANCE_SECONDS, idempotency_key=idempotency_key(request))
        except SignatureError as exc:
            raise exceptions.BadSignature(str(exc)) from None
        self.delivery = delivery_id(digest)
        return super().post(request, name, instance_id, event_type)
