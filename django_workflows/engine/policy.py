"""A step's config (Cloudflare's WorkflowStepConfig): validated, merged with the defaults, and applied."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any, NoReturn

from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.durations import parse_duration
from django_workflows.errors import InvalidStepInput, WorkflowConfigError

BACKOFFS = ("constant", "linear", "exponential")
_TOP_KEYS = {"retries", "timeout", "sensitive", "atomic"}
# "sensitive": "output" keeps a step's result out of the admin, the API and the CLI (it is still journaled,
# for the replays): a card token, a personal record.
SENSITIVE_VALUES = ("output",)
# A step's undo and its config, which the engine takes out before the policy is built (rollbacks).
_UNDO_KEYS = {"rollback", "rollback_config", "rollbackConfig"}
_RETRY_KEYS = {"limit", "delay", "backoff"}


@dataclass(frozen=True)
class StepPolicy:

    retry_limit: int
    retry_delay: timedelta
    backoff: str
    timeout: timedelta
    delay_function: Callable[[int], object] | None = None
    sensitive: str | None = None
    # The body and its journal row commit in one transaction of the workflow database (atomic_steps).
    atomic: bool = False
    """``retries.delay`` given as a function of the attempt that failed (1, 2, ...): its answer, a
    duration, is the wait, and ``backoff`` is not applied."""

    @property
    def max_attempts(self) -> int:
        # Cloudflare's ``limit`` counts retries, so one more attempt than that.
        return self.retry_limit + 1

    def delay_after(self, failed_attempts: int) -> timedelta:
        """The wait before the next attempt, once ``failed_attempts`` attempts have failed."""
        if self.delay_function is not None:
            return _duration(self.delay_function(failed_attempts), "retries.delay", f"retries.delay({failed_attempts})")
        if self.backoff == "constant":
            return self.retry_delay
        if self.backoff == "linear":
            return self.retry_delay * failed_attempts
        # An int: failed_attempts is 1 or more (typeshed's int ** int is Any, a negative power being a float).
        factor: int = 2 ** (failed_attempts - 1)
        return self.retry_delay * factor

    @cached_property
    def config_json(self) -> str:
        """``as_config()`` as JSON text, encoded once: every new step journals it."""
        return json.dumps(self.as_config())

    def as_config(self) -> dict[str, Any]:
        """The policy in journal form: durations in milliseconds."""
        return {
            "retries": {
                "limit": self.retry_limit,
                "delay": (int(self.retry_delay / timedelta(milliseconds=1)) if self.delay_function is None
                          else f"{getattr(self.delay_function, '__name__', 'function')}(attempt)"),
                "backoff": self.backoff,
            },
            "timeout": int(self.timeout / timedelta(milliseconds=1)),
            **({"sensitive": self.sensitive} if self.sensitive else {}),
            **({"atomic": True} if self.atomic else {}),
        }


def _fail(where: str, message: str) -> NoReturn:
    raise WorkflowConfigError(f"{where}: {message}")


def validate_config(config: Any, where: str) -> None:
    """Raise a ``WorkflowConfigError`` naming ``where`` if ``config`` is not a valid step config."""
    if config is None:
        return
    if not isinstance(config, dict):
        _fail(where, f"config must be a dict such as {{'retries': {{'limit': 3}}}}, got {type(config).__name__}")
    unknown = set(config) - _TOP_KEYS - _UNDO_KEYS
    if unknown:
        _fail(where, f"unknown config key(s) {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    retries = config.get("retries")
    if retries is not None:
        if not isinstance(retries, dict):
            _fail(where, f"'retries' must be a dict, got {type(retries).__name__}")
        unknown = set(retries) - _RETRY_KEYS
        if unknown:
            _fail(where, f"unknown retries key(s) {sorted(unknown)}; allowed: {sorted(_RETRY_KEYS)}")
        if "limit" in retries:
            limit = retries["limit"]
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
                _fail(where, f"retries.limit must be a whole number of retries, 0 or more, got {limit!r}")
        if "backoff" in retries and retries["backoff"] not in BACKOFFS:
            _fail(where, f"retries.backoff must be one of {', '.join(BACKOFFS)}, got {retries['backoff']!r}")
        if "delay" in retries and not callable(retries["delay"]):
            _duration(retries["delay"], where, "retries.delay")
    if "sensitive" in config and config["sensitive"] not in SENSITIVE_VALUES:
        _fail(where, f"sensitive must be {' or '.join(map(repr, SENSITIVE_VALUES))}, got {config['sensitive']!r}")
    if "atomic" in config and not isinstance(config["atomic"], bool):
        _fail(where, f"atomic must be True or False, got {config['atomic']!r}")
    if "timeout" in config:
        if _duration(config["timeout"], where, "timeout") <= timedelta(0):
            _fail(where, "timeout must be more than zero")


def _duration(value: object, where: str, key: str) -> timedelta:
    try:
        return parse_duration(value, what=key)
    except InvalidStepInput as exc:
        raise WorkflowConfigError(f"{where}: {exc}") from None


def build_policy(config: dict[str, Any] | None, defaults: dict[str, Any], where: str) -> StepPolicy:
    validate_config(config, where)
    config = config or {}
    retries = {**defaults.get("retries", {}), **(config.get("retries") or {})}
    delay = retries["delay"]
    return StepPolicy(
        retry_limit=retries["limit"],
        retry_delay=timedelta(0) if callable(delay) else _duration(delay, where, "retries.delay"),
        backoff=retries["backoff"],
        timeout=_duration(config.get("timeout", defaults["timeout"]), where, "timeout"),
        delay_function=delay if callable(delay) else None,
        sensitive=config.get("sensitive"),
        atomic=config.get("atomic", False),
    )


_default_policy: tuple[dict[str, Any], StepPolicy] | None = None


def default_policy() -> StepPolicy:
    """The policy of a step called without ``config``: built once, and again only when the setting is
    replaced (``override_settings``)."""
    global _default_policy
    defaults = workflow_settings.DEFAULT_STEP_CONFIG
    if _default_policy is None or _default_policy[0] is not defaults:
        _default_policy = (defaults, build_policy(None, defaults, "DJANGO_WORKFLOWS['DEFAULT_STEP_CONFIG']"))
    return _default_policy[1]
