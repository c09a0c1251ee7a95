"""``WEBHOOK_SECRETS`` read and checked: the key each workflow's webhook deliveries are signed with.

A secret is text (or bytes), long enough not to be guessed; a workflow that declares webhook-only event
types needs one, or every delivery fails its signature check; a name no workflow has is most likely a
typo. ``manage.py check`` reports all of it (E028, E029, W111, W112, W113; a short secret is a warning,
as Django's check of a short ``SECRET_KEY`` is). At run time a secret that cannot be used (not text, or
empty) is treated as no secret at all: the delivery answers as a wrong signature does, and the error is
logged for the operator, so a provider never sees a server error and never learns the configuration."""

from __future__ import annotations

import logging

from django_workflows.foundations.conf import workflow_settings

logger = logging.getLogger("django_workflows.webhooks")

# Below this many characters a secret could be guessed by an attacker with time: 32 hex digits or a
# Stripe-style "whsec_..." are well above it.
MIN_SECRET_LENGTH = 16


def secret_problem(secret) -> str | None:
    """Why ``secret`` cannot sign deliveries at all, or ``None``."""
    if not isinstance(secret, (str, bytes)):
        return f"must be text (a str) or bytes, got {type(secret).__name__}"
    if not secret:
        return "is empty"
    return None


def secret_weakness(secret) -> str | None:
    """Why a usable ``secret`` could be guessed, or ``None``."""
    if len(secret) < MIN_SECRET_LENGTH:
        return f"is {len(secret)} characters long, which an attacker could guess; use at least {MIN_SECRET_LENGTH}"
    return None


def secret_key(secret) -> bytes:
    """The HMAC key of a usable secret."""
    return secret if isinstance(secret, bytes) else secret.encode()


def secret_for(workflow_name: str) -> bytes | None:
    """The key a workflow's deliveries are signed with, or ``None`` when it has no usable secret (the
    operator is told why in the log; the sender is not)."""
    secrets = workflow_settings.WEBHOOK_SECRETS
    secret = secrets.get(workflow_name) if isinstance(secrets, dict) else None
    if secret is None:
        return None
    problem = secret_problem(secret)
    if problem is not None:
        logger.error("DJANGO_WORKFLOWS['WEBHOOK_SECRETS'][%r] %s: its webhook deliveries are refused "
                     "(manage.py check says more).", workflow_name, problem)
        return None
    return secret_key(secret)
