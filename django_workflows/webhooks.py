"""Signed webhooks for senders that cannot add a bearer token (payment providers, chat buttons, code hosts).

The sender signs ``"<unix timestamp>.<raw body>"`` with HMAC-SHA256 and the workflow's secret
(``WEBHOOK_SECRETS``) and sends ``X-Workflows-Signature: t=<timestamp>,v1=<hex digest>``. A timestamp
further than ``WEBHOOK_TOLERANCE_SECONDS`` from now is refused, so a captured request cannot be replayed
later, and the inbox remembers each delivery's signature (``Delivery``, through a restart too), so it
cannot be replayed sooner either, to any instance, whatever key it carries; the digest is compared in
constant time.

A sender that retries a delivery (and signs each retry anew) sends the same ``Idempotency-Key`` header
each time, and signs ``"<timestamp>.<key>.<raw body>"`` instead: the key is covered by the signature, so
a captured request cannot be replayed under another key, and the inbox stores the event once per instance
and key. Keys sent to the webhook are its own: a person's ``Idempotency-Key`` through the API never
stands for a provider's.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from django_workflows.shared.webhook_secrets import secret_key

SIGNATURE_HEADER = "X-Workflows-Signature"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # ASCII digits only: int() refuses "²", and caps the length
SOURCE_HEADER = "X-Workflows-Source"


class SignatureError(ValueError):
    """The signature is missing, malformed, stale or wrong; the message says which."""


def _signed(timestamp, body: bytes, idempotency_key: str | None) -> bytes:
    key = "" if idempotency_key is None else f"{idempotency_key}."
    return f"{timestamp}.{key}".encode() + body


def sign(secret: str | bytes, body: bytes, timestamp: int | None = None, idempotency_key: str | None = None) -> str:
    """The value of the signature header for ``body`` (what a sender computes), with the
    ``Idempotency-Key`` it sends beside it, if any."""
    timestamp = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret_key(secret), _signed(timestamp, body, idempotency_key), hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: str | bytes, body: bytes, header: str | None, tolerance: int, now: float | None = None,
           idempotency_key: str | None = None) -> str:
    """Raise ``SignatureError`` unless ``header`` is a valid, fresh signature of ``body``.

    Returns the digest that matched: what identifies this delivery (see ``delivery_id``).
    """
    if not header:
        raise SignatureError(f"The {SIGNATURE_HEADER} header is missing.")
    pairs = [part.strip().split("=", 1) for part in header.split(",") if "=" in part]
    timestamps = [value for key, value in pairs if key == "t"]
    # Only lowercase hex of the right length can be a digest; anything else is not compared at all
    # (hmac.compare_digest refuses non-ASCII text with a TypeError).
    digests = [value for key, value in pairs if key == "v1" and _HEX_DIGEST.fullmatch(value)]
    if len(timestamps) != 1 or not _TIMESTAMP.fullmatch(timestamps[0]) or not digests:
        raise SignatureError(f"The {SIGNATURE_HEADER} header must read 't=<unix time>,v1=<hex HMAC-SHA256>'.")
    timestamp = timestamps[0]
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > tolerance:
        raise SignatureError(f"The signature's timestamp is more than {tolerance} seconds from now.")
    expected = hmac.new(secret_key(secret), _signed(timestamp, body, idempotency_key), hashlib.sha256).hexdigest()
    # Every candidate is compared, so the time taken does not tell which one matched.
    matched = [digest for digest in digests if hmac.compare_digest(expected, digest)]
    if not matched:
        raise SignatureError("The signature does not match the body.")
    return matched[0]


def delivery_id(digest: str) -> str:
    """What the inbox remembers of a signed delivery, to refuse it when it is posted again.

    A hash of the matched digest rather than the digest itself. The digest covers the time and the
    body, not the address, so the same id is refused whichever instance or workflow it is replayed to.
    """
    return hashlib.sha256(f"webhook:{digest}".encode()).hexdigest()
