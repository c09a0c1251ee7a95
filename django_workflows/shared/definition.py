"""How a workflow is written: a ``WorkflowEntrypoint`` subclass with ``run(event, step)``.

Defining a subclass registers it under its ``name``; each installed app's
``workflows.py`` is imported when Django starts, so defining the class there
is all it takes.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django_workflows.errors import WorkflowNotFound

_KEBAB_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def kebab_case(name: str) -> str:
    """``PaymentApproval`` -> ``payment-approval``; ``HTTPCheck`` -> ``http-check``."""
    return _KEBAB_BOUNDARY.sub("-", name).replace("_", "-").lower()


class _ReadAsMapping:
    """Lets a frozen dataclass be read as Cloudflare's Python SDK reads its context, a dict converted
    from JavaScript (``ctx["attempt"]``, ``ctx["step"]["name"]``, ``"config" in ctx``), as well as by
    attribute (``ctx.attempt``)."""

    __slots__ = ()

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        if key not in self.keys():
            raise KeyError(f"{key!r}: it has {', '.join(map(repr, self.keys()))}")
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def __contains__(self, key: object) -> bool:
        return key in self.keys()


@dataclass(frozen=True)
class WorkflowEvent:
    """What ``run()`` receives: the instance's params and identity. Read-only.

    Read as attributes (``event.payload``) or, as Cloudflare's Python SDK reads it, as keys
    (``event["payload"]``, ``event["timestamp"]``, ``event["instanceId"]``), so ported code runs as is.
    """

    payload: Any
    timestamp: datetime
    instance_id: str
    workflow_name: str

    _KEYS = {"payload": "payload", "timestamp": "timestamp", "instanceId": "instance_id",
             "instance_id": "instance_id", "workflowName": "workflow_name", "workflow_name": "workflow_name"}

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, self._KEYS[key])
        except (KeyError, TypeError):
            raise KeyError(f"{key!r}: an event has {', '.join(map(repr, self.keys()))}") from None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, self._KEYS[key]) if key in self._KEYS else default

    def keys(self) -> list[str]:
        return ["payload", "timestamp", "instanceId", "workflowName"]

    def __contains__(self, key: str) -> bool:
        return key in self._KEYS


class WorkflowEntrypoint:
    """Subclass this and implement ``run(self, event, step)``.

    ``name`` defaults to the class name in kebab-case. ``step_limit`` raises or
    lowers the number of steps one instance may take (sleeps do not count).
    ``cpu_time_limit`` raises or lowers the CPU time one replay may use
    (milliseconds, or a duration such as "2 minutes"; at most 5 minutes).
    ``approvals`` names the event types a person sends by approving or rejecting
    in the admin (``approvals = {"manager-approval"}``); its *Waiting for
    approval* page lists only waits for them, not webhooks or other events.
    ``events`` declares the event types the workflow accepts, who may send each
    and what its payload must look like (``django_workflows.shared.declared_events``);
    without it, any valid type is accepted from anyone allowed to send events.
    ``version`` names the code's version (a string, or a whole number), recorded
    on each instance created (``Instance.version``); without it, the ``VERSION``
    setting's is. Which code an old instance runs is decided by ``step.patched``,
    not by the version.
    ``schedules`` lists cron expressions (``["0 9 * * mon-fri"]``): ``workflows_worker``
    creates one instance per slot, in ``schedule_timezone`` (default "UTC"), and
    after downtime follows ``schedule_catch_up`` ("latest", "all" or "none";
    ``django_workflows.shared.cron``).
    ``concurrency`` bounds how many of its instances run at once across every worker (the others
    stay queued, oldest first); ``rate_limit`` ("100/minute", per second, minute or hour) bounds its
    starts in any sliding window of that length (``django_workflows.shared.limits``); either may be keyed,
    ``{"limit": 2, "key": "params.customer_id"}``, to hold per customer.
    ``priority`` (0 to 9, higher first) orders the instances waiting to start in a queue, and ``queue``
    names the queue its replays are routed to (``workflows_worker --queues``; ``django_workflows.shared.routing``).
    ``timeout`` ("7 days", milliseconds or a timedelta) gives each instance a deadline, fixed when it is
    created: past it the instance ends errored with ``WorkflowTimeoutError`` (``django_workflows.shared.deadlines``);
    ``create(timeout=...)`` overrides it for one instance.
    Set ``abstract = True`` on a base class that is not a workflow itself.
    """

    name: ClassVar[str]
    step_limit: ClassVar[int | None] = None
    cpu_time_limit: ClassVar[int | float | str | timedelta | None] = None
    approvals: ClassVar[Collection[str]] = frozenset()
    events: ClassVar[dict[str, dict[str, Any]] | None] = None
    version: ClassVar[str | int | None] = None
    schedules: ClassVar[Sequence[str]] = ()
    schedule_timezone: ClassVar[str] = "UTC"
    schedule_catch_up: ClassVar[str] = "latest"
    concurrency: ClassVar[int | dict[str, Any] | None] = None
    rate_limit: ClassVar[str | dict[str, Any] | None] = None
    priority: ClassVar[int] = 0
    queue: ClassVar[str] = "default"
    timeout: ClassVar[int | float | str | timedelta | None] = None
    abstract: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "abstract" not in cls.__dict__:
            cls.abstract = False
        if cls.abstract:
            return
        if "name" not in cls.__dict__:
            cls.name = kebab_case(cls.__name__)
        registry.register(cls)

    def run(self, event: WorkflowEvent, step):  # pragma: no cover - always overridden
        raise NotImplementedError(f"{type(self).__name__} must implement run(self, event, step)")


def is_async_generator(cls) -> bool:
    """Whether ``run()`` is an async generator function, which no replay can run (``async def run`` that
    returns is fine)."""
    return inspect.isasyncgenfunction(getattr(cls, "run", None))


OPTIONS_ATTRIBUTE = "_workflow_options"
"""Where ``WorkflowOptions.of`` keeps a class's options, read once (``django_workflows.shared.options``)."""


class Registry:
    """Every defined workflow class, by name, with duplicates kept for the system check."""

    def __init__(self):
        self._by_origin: dict[tuple[str, str], type[WorkflowEntrypoint]] = {}
        # {module name: the error importing it}: an app whose workflows.py is broken.
        self.import_errors: dict[str, str] = {}
        # One more at each register and unregister: what is derived from the classes is kept until it moves.
        self.generation = 0
        self._names: tuple[int, tuple[str, ...]] = (-1, ())

    def register(self, cls: type[WorkflowEntrypoint]) -> None:
        # Keyed by where the class was defined, so re-importing a module
        # replaces its classes instead of reporting them as duplicates.
        self._by_origin[(cls.__module__, cls.__qualname__)] = cls
        self.generation += 1
        # Registering a class again reads its options again: whoever changed an attribute since they
        # were read re-registers it to have the change seen.
        if OPTIONS_ATTRIBUTE in cls.__dict__:
            delattr(cls, OPTIONS_ATTRIBUTE)

    def unregister(self, cls: type[WorkflowEntrypoint]) -> None:
        self._by_origin.pop((cls.__module__, cls.__qualname__), None)
        self.generation += 1

    def all(self) -> list[type[WorkflowEntrypoint]]:
        return list(self._by_origin.values())

    def names(self) -> list[str]:
        # Read at every create() and claim: sorted once per generation.
        if self._names[0] != self.generation:
            self._names = (self.generation, tuple(sorted({cls.name for cls in self._by_origin.values()})))
        return list(self._names[1])

    def duplicates(self) -> dict[str, list[type[WorkflowEntrypoint]]]:
        by_name: dict[str, list[type[WorkflowEntrypoint]]] = {}
        for cls in self._by_origin.values():
            by_name.setdefault(cls.name, []).append(cls)
        return {name: classes for name, classes in by_name.items() if len(classes) > 1}

    def get(self, name: str) -> type[WorkflowEntrypoint]:
        found = [cls for cls in self._by_origin.values() if cls.name == name]
        if not found:
            known = ", ".join(self.names()) or "none"
            broken = "".join(f" {module} failed to import ({error}); the workflow may be defined there."
                             for module, error in sorted(self.import_errors.items()))
            raise WorkflowNotFound(
                f"No workflow named {name!r}. Known workflows: {known}. A workflow is a "
                f"WorkflowEntrypoint subclass defined in an installed app's workflows.py.{broken}",
                workflow=name,
            )
        # With duplicates the system check fails; until it is fixed, the last defined wins.
        return found[-1]


registry = Registry()


def discover() -> None:
    """Import each installed app's ``workflows`` module. One that fails to import is recorded (and
    reported by system check W009) instead of stopping Django, so the others keep running."""
    import importlib
    import logging
    from importlib.util import find_spec

    from django.apps import apps

    for app_config in apps.get_app_configs():
        module = f"{app_config.name}.workflows"
        try:
            if find_spec(module) is None:
                continue
        except (ImportError, ValueError):
            continue
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # a module that calls sys.exit() must not stop the site
            registry.import_errors[module] = f"{type(exc).__name__}: {exc}"
            logging.getLogger("django_workflows").exception("Importing %s failed", module)
        else:
            registry.import_errors.pop(module, None)


@dataclass(frozen=True)
class WorkflowStepEvent(_ReadAsMapping):
    """What ``step.wait_for_event`` returns: the event that arrived, read as attributes
    (``received.payload``) or as Cloudflare's Python SDK reads it, as keys (``received["payload"]``)."""

    type: str
    payload: Any
    timestamp: datetime


@dataclass(frozen=True)
class StepIdentity(_ReadAsMapping):
    name: str
    """The name given to step.do."""
    count: int
    """How many times run() has called a step of this name so far, this one included (from 1)."""


@dataclass(frozen=True)
class StepContext(_ReadAsMapping):
    """What a step function receives when it declares a ``ctx`` parameter (Cloudflare's
    ``WorkflowStepContext``): which step this is, which attempt, and its config with the defaults
    applied (durations in milliseconds). Read as attributes (``ctx.step.name``) or, as Cloudflare's
    Python SDK reads it, as keys (``ctx["step"]["name"]``, ``ctx["attempt"]``)."""

    step: StepIdentity
    attempt: int
    config: dict


def parameters(fn) -> tuple[str, ...]:
    """The names ``fn`` may be called with, read from its code object when it has one (cheap: this runs
    for every step)."""
    code = getattr(fn, "__code__", None)
    if code is not None:
        return code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()
