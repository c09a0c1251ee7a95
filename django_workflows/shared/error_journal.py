"""How an exception is journaled, as Cloudflare's ``{name, message}``, and raised again on replay."""

from __future__ import annotations

import importlib
import json
from typing import Any

from django_workflows.errors import WorkflowError
from django_workflows.moved_modules import MOVED_MODULES
from django_workflows.shared.serialization import storable_text

# What user code may raise that fails its step or its instance rather than the worker, SystemExit and
# KeyboardInterrupt included (Replay._run says why).
USER_FAILURES = (Exception, SystemExit, KeyboardInterrupt)
# Arguments longer than this (as JSON) are not journaled: the message stands for them.
_MAX_ARGUMENTS = 4096


def describe_error(exc: BaseException) -> dict:
    """An error as it is journaled: Cloudflare's ``{name, message}``, plus where its class lives, and its
    arguments when the message alone would not rebuild it (``KeyError("sku")``, whose message is
    ``'sku'``; ``NonRetryableError()``; an error class taking several arguments)."""
    cls = type(exc)
    # storable_text: a message may hold NUL or half a surrogate pair, which the journal cannot store.
    message = storable_text(str(exc))
    described: dict[str, Any] = {"name": cls.__name__, "message": message,
                                  "type": f"{cls.__module__}:{cls.__qualname__}"}
    arguments = _journalable_arguments(exc.args)
    if arguments is not None and arguments != [message]:
        described["args"] = arguments
    return described


def instance_error(described: dict) -> dict:
    """A described error as the instance's ``error`` keeps it: Cloudflare's ``{name, message}`` without
    where its class lives or its arguments, which only a step's row (to raise it again) and a child's end
    (to raise it in its parent) need."""
    return {key: value for key, value in described.items() if key not in ("type", "args")}


def _journalable_arguments(arguments: tuple) -> list | None:
    """``arguments`` as a JSON list that reads back the same, or None: never pickled, never a repr."""
    try:
        text = json.dumps(list(arguments), ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    # JSON escapes NUL, which PostgreSQL's jsonb refuses all the same; a lone surrogate stays raw here.
    if len(text) > _MAX_ARGUMENTS or "\\u0000" in text or storable_text(text) != text \
            or json.loads(text) != list(arguments):
        return None
    return list(arguments)


class StepFailed(WorkflowError):
    """A journaled step error whose original class cannot be rebuilt here."""


# Classes the package moved, by the address journals written before the move hold: a replay after an
# upgrade (or beside an older worker in a rolling deploy) rebuilds them as the same class.
MOVED_CLASSES = {"django_workflows.engine:StepFailed": "django_workflows.shared.error_journal:StepFailed"}


def rebuild_error(error: dict) -> Exception:
    """The journaled error as an exception of its original class, so ``except`` clauses match alike
    on the first run and on every replay."""
    message = error.get("message", "")
    cls = None
    address = error.get("type") or ""
    module_name, _, qualname = MOVED_CLASSES.get(address, address).partition(":")
    # A journal written before a module moved names its old path: read from the new one, without the
    # warning an import by the old path gives (the journal is no one's code to change).
    module_name = MOVED_MODULES.get(module_name, module_name)
    if module_name and qualname:
        try:
            cls = importlib.import_module(module_name)
            for part in qualname.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError):
            cls = None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return StepFailed(f"{error.get('name', 'Error')}: {message}", error_name=error.get("name"))
    arguments = error.get("args")
    try:
        exc = cls(*arguments) if isinstance(arguments, list) else cls(message)
    except Exception:
        exc = cls.__new__(cls)
        Exception.__init__(exc, *(arguments if isinstance(arguments, list) else [message]))
    return exc


def rollback_of(error: dict | None) -> dict | None:
    """Cloudflare's ``status().rollback``, ``{outcome, error}``, read off an instance's journaled error:
    ``outcome`` is ``"complete"`` when every undo ran, ``"errored"`` when one failed for good (its
    ``{name, message}`` is the error); ``None`` when no rollback ran. The error itself keeps the rollback's
    details (``error["rollback"]``: how many steps were undone, which one failed)."""
    rollback = (error or {}).get("rollback") if isinstance(error, dict) else None
    if not isinstance(rollback, dict):
        return None
    if rollback.get("status") == "complete":
        return {"outcome": "complete", "error": None}
    failure = rollback.get("error") or {}
    return {"outcome": "errored",
            "error": {"name": failure.get("name", "Error"), "message": failure.get("message", "")}}
