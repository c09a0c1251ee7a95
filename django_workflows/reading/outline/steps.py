"""Recognising a step call in ``run()``'s source, and the ``Step`` it makes: its name, and the detail
the drawing writes under it (retries and timeout, a sleep's duration, the events waited for).

Also how an expression's source is kept as text: shortened, except a condition, which is kept whole.
"""

from __future__ import annotations

import ast
from typing import Any

from django_workflows.reading.outline.nodes import Step

STEP_METHODS = {"do", "sleep", "sleep_until", "wait_for_event"}
# The parameters of each step method in order, for calls that pass them by keyword.
_PARAMETERS = {
    "do": ("name", "fn", "config"),
    "sleep": ("name", "duration"),
    "sleep_until": ("name", "timestamp"),
    "wait_for_event": ("name", "type", "timeout"),
}
MAX_SOURCE = 60
# Conditions (if, elif, case, except, loop headers) decide which way run() goes, so they are kept
# whole for the drawing to wrap over lines; this only bounds a pathological one.
MAX_CONDITION = 400


def shorten(text: str, limit: int = MAX_SOURCE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def source(node) -> str:
    return shorten(ast.unparse(node))


def condition(node) -> str:
    return shorten(ast.unparse(node), MAX_CONDITION)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _duration_text(node) -> str:
    """A duration argument as written: "1 hour", "500 ms" for a number, or its expression."""
    if node is None:
        return ""
    value = _literal(node)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g} ms"
    return source(node)


def _config_summary(node) -> str:
    config = _literal(node) if node is not None else None
    if not isinstance(config, dict):
        return "" if node is None else f"config={source(node)}"
    parts = []
    retries = config.get("retries")
    if isinstance(retries, dict) and "limit" in retries:
        parts.append(f"retries {retries['limit']}")
        if "delay" in retries:
            parts.append(f"delay {retries['delay']}")
    if "timeout" in config:
        parts.append(f"timeout {config['timeout']}")
    return ", ".join(str(part) for part in parts)


def step_method(call: ast.Call, step_name: str) -> str | None:
    """The step method a call makes (``do``, ``sleep``, ...) when it is called on ``step_name``."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in STEP_METHODS
        and isinstance(func.value, ast.Name)
        and func.value.id == step_name
    ):
        return func.attr
    return None


def arguments(method: str, call: ast.Call) -> dict[str, ast.expr]:
    given = dict(zip(_PARAMETERS[method], call.args, strict=False))
    given.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
    return given


def make_step(method: str, call: ast.Call, lineno: int) -> Step:
    args = arguments(method, call)
    name_node = args.get("name")
    name = (
        name_node.value
        if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)
        else None
    )
    name_source = name if name is not None else (source(name_node) if name_node is not None else "?")
    if method == "do":
        detail = _config_summary(args.get("config"))
    elif method == "sleep":
        detail = _duration_text(args.get("duration"))
    elif method == "sleep_until":
        detail = "until " + (source(args["timestamp"]) if "timestamp" in args else "?")
    else:
        types: Any = _literal(args["type"]) if "type" in args else None
        if isinstance(types, str):
            types = [types]
        literal = isinstance(types, list) and all(isinstance(t, str) for t in types)
        detail = " or ".join(types) if literal else (source(args["type"]) if "type" in args else "?")
        timeout = args.get("timeout")  # wait_for_event's own default when not given
        detail = f"{detail}, timeout {'24 hours' if timeout is None else _duration_text(timeout)}"
        return Step(kind=method, name=name, name_source=name_source, detail=detail, lineno=lineno,
                    event_types=tuple(types) if literal else None)
    return Step(kind=method, name=name, name_source=name_source, detail=detail, lineno=lineno)
