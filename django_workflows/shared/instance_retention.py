"""How long an instance asks to be kept once it ends: ``create(retention={"success": ..., "error": ...})``,
in place of the ``RETENTION_DAYS`` setting, each duration parsed and bounded here for every surface."""

from __future__ import annotations

from datetime import timedelta

from django_workflows.shared.durations import parse_duration
from django_workflows.errors import InvalidParams, InvalidStepInput

MAX_RETENTION = timedelta(days=365)
"""The longest retention an instance may choose for itself (``create(retention=...)``)."""

RETENTION_OUTCOMES = ("success", "error")
# Cloudflare's binding spells the keys successRetention and errorRetention; its REST API
# success_retention and error_retention. Named in the refusal, so that ported code is told the key here.
_CLOUDFLARE_RETENTION_KEYS = {"successRetention": "success", "success_retention": "success",
                              "errorRetention": "error", "error_retention": "error"}


def parse_retention_duration(outcome: str, value) -> timedelta:
    """One duration of a ``retention``: milliseconds or "N unit(s)", from zero to ``MAX_RETENTION``;
    anything else is ``InvalidParams``."""
    what = f"retention[{outcome!r}]"
    try:
        delta = parse_duration(value, what=what)
    except InvalidStepInput as exc:
        raise InvalidParams(str(exc), outcome=outcome) from None
    except OverflowError:
        delta = None  # past what a timedelta holds: longer than any retention
    if delta is None or delta > MAX_RETENTION:
        raise InvalidParams(
            f"{what}: {value!r} is longer than the {MAX_RETENTION.days} days an instance may keep itself; "
            f"leave it out to follow the RETENTION_DAYS setting.", outcome=outcome)
    return delta


def parse_retention(retention) -> dict[str, timedelta]:
    """``{"success": ..., "error": ...}`` (either key optional, None for the setting's) as timedeltas;
    a key or value it cannot take is ``InvalidParams``."""
    if retention is None:
        return {}
    if not isinstance(retention, dict):
        raise InvalidParams(f"retention must be a dict with 'success' and/or 'error' durations, got "
                            f"{type(retention).__name__}")
    unknown = [key for key in retention if key not in RETENTION_OUTCOMES]
    if unknown:
        hints = [f" ({key!r} is Cloudflare's name for {_CLOUDFLARE_RETENTION_KEYS[key]!r})"
                 for key in unknown if key in _CLOUDFLARE_RETENTION_KEYS]
        raise InvalidParams("retention takes the keys 'success' and 'error', not "
                            f"{', '.join(map(repr, unknown))}{''.join(hints)}")
    return {outcome: parse_retention_duration(outcome, value) for outcome, value in retention.items()
            if value is not None}
