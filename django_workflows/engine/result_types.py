"""A step's declared result type: ``step.do(name, fn, result_type=Quote)``, or ``fn``'s return annotation.

The journal keeps what the step returned, as it returned it (a dict stays a dict, in the tagged form of
``typed_values`` where it holds more than JSON); the declared type is applied to the value ``run()`` gets,
on the first run (to the value a replay will read back, not the one the body returned) and on every
replay. So both see the same type, and a journal written before the declaration replays into it.
``declared_types`` says what becomes what.

The declaration travels in the step's config under ``"result_type"`` (as an undo travels under
``"rollback"``), so that every way of calling a step (the direct form, step functions, ``step.all``, an
``async def run``) carries it to ``DoSteps.begin_do`` unchanged; it is taken out before the step's policy
is built, and never journaled.
"""

from __future__ import annotations

from typing import Any

from django_workflows.shared.declared_types import (
    DeclaredTypeMismatch,
    convert,
    is_declarable,
    return_annotation,
    type_name,
)
from django_workflows.errors import InvalidStepInput, StepResultError

CONFIG_KEY = "result_type"


def declare(config: dict[str, Any] | None, result_type: Any) -> dict[str, Any] | None:
    """``config`` with ``result_type`` declared in it (unchanged when ``result_type`` is None)."""
    return config if result_type is None else {**(config or {}), CONFIG_KEY: result_type}


def split_config(name: str, fn: Any, config: dict[str, Any] | None) -> tuple[dict[str, Any] | None, Any]:
    """``config`` without the declaration, and the type declared: ``result_type``, else ``fn``'s return
    annotation, else None (the value as the journal reads it back)."""
    if config is not None and CONFIG_KEY in config:
        declared = config[CONFIG_KEY]
        config = {key: value for key, value in config.items() if key != CONFIG_KEY} or None
        if declared is not None and not is_declarable(declared):
            raise InvalidStepInput(
                f"step.do({name!r}): result_type must be a class (Decimal, a dataclass, a Pydantic model) "
                f"or a generic of one (list[Decimal], Quote | None), got {declared!r}")
        if declared is not None:
            return config, declared
    return config, return_annotation(fn) if callable(fn) else None


def journaled_as(value: Any, declared: Any, name: str, key: str) -> Any:
    """A journaled result made into the declared type, or the step's error saying why it cannot be."""
    try:
        return convert(value, declared)
    except DeclaredTypeMismatch as exc:
        raise mismatch(exc, declared, name, key) from None


def mismatch(exc: DeclaredTypeMismatch, declared: Any, name: str, key: str) -> StepResultError:
    return StepResultError(
        f"Step {name!r} returned a value that cannot be its declared result type {type_name(declared)}: "
        f"{exc}. "
        "Return a value of that type (or one docs/guide/typed-values.md says becomes it), or change "
        "result_type= (or the step function's return annotation).", step=key)

