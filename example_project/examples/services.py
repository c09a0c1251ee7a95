"""In-project fakes of the outside services the examples call: a parser, a summarizer, a mailer,
a payment provider, an inventory. No network: each call is a ServiceCall row.

Tell a service to fail with ``EXAMPLE_SERVICES_FAIL`` in settings or the environment:
``"summarize=2,charge=always"`` fails the first two summarize calls of each key, and every charge.
"""

from __future__ import annotations

import os

from django.conf import settings

from examples.models import ServiceCall


class ServiceError(Exception):
    """The fake service failed, as a real one sometimes does."""


def failure_plan() -> dict[str, str]:
    raw = getattr(settings, "EXAMPLE_SERVICES_FAIL", None) or os.environ.get("EXAMPLE_SERVICES_FAIL", "")
    if isinstance(raw, dict):
        return {k: str(v) for k, v in raw.items()}
    plan = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        service, _, times = part.partition("=")
        plan[service.strip()] = times.strip() or "always"
    return plan


def _call(service: str, key: str, result=None):
    plan = failure_plan().get(service)
    earlier_failures = ServiceCall.objects.filter(service=service, key=key, succeeded=False).count()
    fails = plan == "always" or (plan is not None and plan.isdigit() and earlier_failures < int(plan))
    ServiceCall.objects.create(service=service, key=key, succeeded=not fails, detail=None if fails else result)
    if fails:
        raise ServiceError(f"{service} is unavailable (call {earlier_failures + 1} for {key})")
    return result


def parse_document(key: str, url: str) -> dict:
    return _call("parse", key, {"url": url, "text": f"The text of {url}.", "words": 4})


def summarize(key: str, text: str) -> str:
    return _call("summarize", key, f"Summary: {text[:40]}")


def notify(key: str, to: str, message: str) -> dict:
    return _call("notify", key, {"to": to, "message": message})


def validate_payment(key: str, payment: dict) -> dict:
    if not isinstance(payment.get("amount"), (int, float)) or payment["amount"] <= 0:
        ServiceCall.objects.create(service="validate", key=key, succeeded=False)
        raise ValueError(f"invalid amount {payment.get('amount')!r}")
    return _call("validate", key, {"amount": payment["amount"], "currency": payment.get("currency", "EUR")})


def ask_manager(key: str, payment: dict) -> dict:
    return _call("ask-manager", key, {"asked": True, "amount": payment["amount"]})


def charge(key: str, amount) -> dict:
    return _call("charge", key, {"charge_id": f"ch_{key}", "amount": amount})


def refund(key: str, charge_id: str) -> dict:
    return _call("refund", key, {"refunded": charge_id})


def reserve_inventory(key: str, items: list) -> dict:
    return _call("reserve", key, {"reservation_id": f"res_{key}", "items": items})


def release_inventory(key: str, reservation_id: str) -> dict:
    return _call("release", key, {"released": reservation_id})


def confirm_order(key: str, order_id) -> dict:
    return _call("confirm", key, {"confirmed": order_id})
