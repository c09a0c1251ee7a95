"""Signed webhooks for senders that cannot add a bearer token (payment providers, chat buttons, code hosts).

The sender signs ``"<unix timestamp>.<raw body>"`` with HMAC-SHA256 and the workflow's secret
(``WEBHOOK_SECRETS``) and sends ``X-Workflows-Signature: t=<timestamp>,v1=<hex digest>``. A timestamp
further than ``WEBHOOK_TOLERANCE_SECONDS`` from now is refused, so a captured request cannot be replayed
later; the digest is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Workflows-Signature"
SOURCE_HEADER = "X-Workflows-Source"


class SignatureError(ValueError):
    """The signature is missing, malformed, stale or wrong; the message says which."""


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The value of the signature header for ``body`` (what a sender computes)."""
    timestamp = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(secret: str, body: bytes, header: str | None, tolerance: int, now: float | None = None) -> None:
    """Raise ``SignatureError`` unless ``header`` is a valid, fresh signature of ``body``."""
    if not header:
        raise SignatureError(f"The {SIGNATURE_HEADER} header is missing.")
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    timestamp, digests = parts.get("t"), [v for k, v in (p.split("=", 1) for p in header.split(",") if "=" in p)
                                          if k == "v1"]
    if not timestamp or not timestamp.isdigit() or not digests:
        raise SignatureError(f"The {SIGNATURE_HEADER} header must read 't=<unix time>,v1=<hex HMAC-SHA256>'.")
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > tolerance:
        raise SignatureError(f"The signature's timestamp is more than {tolerance} seconds from now.")
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, digest) for digest in digests):
        raise SignatureError("The signature does not match the body.")
