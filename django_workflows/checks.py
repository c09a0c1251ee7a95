"""System checks: misconfiguration reported by ``manage.py check``, each with a stable id and a hint."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, router
from django.db.models import Count

from django_workflows import declared_events, limits, schedules
from django_workflows.conf import DEFAULTS, HARD_STEP_LIMIT, workflow_settings
from django_workflows.definition import WorkflowEntrypoint, is_async_generator, registry
from django_workflows.errors import MissingExtra, WorkflowConfigError
from django_workflows.policy import cpu_time_limit, validate_config, version_text
from django_workflows.validation import is_event_type, is_workflow_name

SIZE_SETTINGS = ("MAX_STEP_RESULT_SIZE", "MAX_EVENT_PAYLOAD_SIZE", "MAX_PARAMS_SIZE", "MAX_PENDING_EVENTS",
                 "LEASE_SECONDS", "POISON_LIMIT", "WAKE_BATCH", "REPLAY_BATCH", "REPLAY_THREADS", "RETENTION_BATCH",
                 "REDISPATCH_SECONDS", "HEARTBEAT_STALE_SECONDS", "WEDGE_SECONDS")
INTERVAL_SETTINGS = ("WAKE_INTERVAL", "SWEEP_INTERVAL", "IDLE_RECHECK_SECONDS")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    messages = []
    user = getattr(settings, "DJANGO_WORKFLOWS", None) or {}
    if not isinstance(user, dict):
        return [Error("DJANGO_WORKFLOWS must be a dict.", hint="Set DJANGO_WORKFLOWS = {...} in settings.",
                      id="django_workflows.E011")]
    for key in workflow_settings.unknown_keys():
        messages.append(Error(
            f"Unknown DJANGO_WORKFLOWS setting {key!r}.",
            hint=f"Remove it, or correct its spelling; the settings are {', '.join(sorted(DEFAULTS))}.",
            id="django_workflows.E001",
        ))
    try:
        executor_class = workflow_settings.import_string("EXECUTOR")
    except ImportError as exc:
        messages.append(Error(
            f"DJANGO_WORKFLOWS['EXECUTOR'] = {workflow_settings.EXECUTOR!r} cannot be imported: {exc}",
            hint="Give the dotted path of a BaseExecutor subclass, e.g. "
                 "'django_workflows.executors.inline.InlineExecutor'.",
            id="django_workflows.E002",
        ))
    else:
        from django_workflows.executors import get_executor
        from django_workflows.executors.base import BaseExecutor

        if not (isinstance(executor_class, type) and issubclass(executor_class, BaseExecutor)):
            messages.append(Error(
                f"DJANGO_WORKFLOWS['EXECUTOR'] = {workflow_settings.EXECUTOR!r} is not a BaseExecutor subclass.",
                hint="Subclass django_workflows.executors.base.BaseExecutor.",
                id="django_workflows.E015",
            ))
        else:
            try:
                executor = get_executor()
            except Exception as exc:  # a check reports what it finds; it never crashes manage.py
                messages.append(Error(
                    f"The executor {workflow_settings.EXECUTOR!r} cannot start: {exc}",
                    hint="Nothing can be created until this is fixed: creating an instance raises this error.",
                    id="django_workflows.E009",
                ))
            else:
                messages.extend(executor.check())
    defaults = workflow_settings.DEFAULT_STEP_CONFIG
    try:
        validate_config(defaults, "DJANGO_WORKFLOWS['DEFAULT_STEP_CONFIG']")
        missing = {"retries", "timeout"} - set(defaults) or (
            {"limit", "delay", "backoff"} - set(defaults["retries"] or {})
        )
        if missing:
            raise WorkflowConfigError(f"DJANGO_WORKFLOWS['DEFAULT_STEP_CONFIG'] lacks {sorted(missing)}")
    except WorkflowConfigError as exc:
        messages.append(Error(
            str(exc),
            hint="DEFAULT_STEP_CONFIG needs retries.limit, retries.delay, retries.backoff and timeout, "
                 "e.g. {'retries': {'limit': 5, 'delay': '10 seconds', 'backoff': 'exponential'}, "
                 "'timeout': '10 minutes'}.",
            id="django_workflows.E003",
        ))
    for key in SIZE_SETTINGS:
        if not _positive_int(getattr(workflow_settings, key)):
            messages.append(Error(
                f"DJANGO_WORKFLOWS[{key!r}] must be a positive whole number, got {getattr(workflow_settings, key)!r}.",
                hint=f"The default is {DEFAULTS[key]}.",
                id="django_workflows.E006",
            ))
    for key in INTERVAL_SETTINGS:
        value = getattr(workflow_settings, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 60:
            messages.append(Error(
                f"DJANGO_WORKFLOWS[{key!r}] must be a number of seconds above 0 and at most 60, got {value!r}.",
                hint=f"The default is {DEFAULTS[key]}.",
                id="django_workflows.E016",
            ))
    retention = workflow_settings.RETENTION_DAYS
    if retention is not None and not _positive_int(retention):
        messages.append(Error(
            f"DJANGO_WORKFLOWS['RETENTION_DAYS'] must be a positive whole number of days or None, got {retention!r}.",
            hint="The default is 30; None keeps finished instances for ever.",
            id="django_workflows.E017",
        ))
    opentelemetry = workflow_settings.OPENTELEMETRY
    if opentelemetry not in (None, True, False):
        messages.append(Error(
            f"DJANGO_WORKFLOWS['OPENTELEMETRY'] must be None, True or False, got {opentelemetry!r}.",
            hint="None (the default) turns spans and metrics on when opentelemetry-api is installed.",
            id="django_workflows.E025",
        ))
    limit = workflow_settings.STEP_LIMIT
    if not _positive_int(limit) or limit > HARD_STEP_LIMIT:
        messages.append(Error(
            f"DJANGO_WORKFLOWS['STEP_LIMIT'] must be a whole number from 1 to {HARD_STEP_LIMIT}, got {limit!r}.",
            hint=f"The default is {DEFAULTS['STEP_LIMIT']}.",
            id="django_workflows.E005",
        ))
    try:
        cpu_time_limit(workflow_settings.CPU_TIME_LIMIT, "DJANGO_WORKFLOWS['CPU_TIME_LIMIT']")
    except WorkflowConfigError as exc:
        messages.append(_cpu_time_limit_error(exc, f"the default is {DEFAULTS['CPU_TIME_LIMIT']!r}"))
    if workflow_settings.VERSION is not None:
        try:
            version_text(workflow_settings.VERSION, "DJANGO_WORKFLOWS['VERSION']")
        except WorkflowConfigError as exc:
            messages.append(_version_error(exc, "None records no version"))
    return messages


def _version_error(exc: WorkflowConfigError, hint: str) -> Error:
    return Error(
        f"{exc}. Creating an instance raises this error.",
        hint=f"Give a release name or number, such as '2025.06.1' or 3; {hint}.",
        id="django_workflows.E020",
    )


def _cpu_time_limit_error(exc: WorkflowConfigError, hint: str) -> Error:
    return Error(
        f"{exc}. A replay that uses more CPU time than this errors its instance.",
        hint=f"Give milliseconds (30000) or a duration ('30 seconds'), at most '5 minutes'; {hint}.",
        id="django_workflows.E019",
    )


@register(Tags.compatibility)
def check_workflows(app_configs=None, **kwargs):
    messages = []
    for name, classes in sorted(registry.duplicates().items()):
        where = ", ".join(f"{cls.__module__}.{cls.__qualname__}" for cls in classes)
        messages.append(Error(
            f"Two or more workflows are named {name!r}: {where}.",
            hint="Give each workflow a unique name (the 'name' class attribute).",
            id="django_workflows.E004",
        ))
    for module, error in sorted(registry.import_errors.items()):
        messages.append(Warning(
            f"{module} failed to import: {error}. Its workflows are not registered; their instances "
            "wait for a worker that knows them (W011).",
            hint=f"Fix {module}; the other workflows keep running.",
            id="django_workflows.W009",
        ))
    for cls in registry.all():
        where = f"{cls.__module__}.{cls.__qualname__}"
        if cls.step_limit is not None and (not _positive_int(cls.step_limit) or cls.step_limit > HARD_STEP_LIMIT):
            messages.append(Error(
                f"{where}.step_limit must be a whole number from 1 to {HARD_STEP_LIMIT}, got {cls.step_limit!r}.",
                hint="Lower it, or split the work across several instances.",
                id="django_workflows.E018",
            ))
        if getattr(cls, "cpu_time_limit", None) is not None:
            try:
                cpu_time_limit(cls.cpu_time_limit, f"{where}.cpu_time_limit")
            except WorkflowConfigError as exc:
                messages.append(_cpu_time_limit_error(exc, "leave it out for the CPU_TIME_LIMIT setting"))
        if getattr(cls, "version", None) is not None:
            try:
                version_text(cls.version, f"{where}.version")
            except WorkflowConfigError as exc:
                messages.append(_version_error(exc, "leave it out for the VERSION setting"))
        if not isinstance(cls.name, str) or not is_workflow_name(cls.name):
            messages.append(Error(
                f"{where}.name must be 1 to 64 letters, digits, '_' or '-', not starting with '-' (it is part "
                f"of the API's URLs and of every instance), got {cls.name!r}.",
                hint="Set name = 'my-workflow' on the class, or leave it out to use the class name in kebab-case.",
                id="django_workflows.E007",
            ))
        if is_async_generator(cls):
            messages.append(Error(
                f"{where}.run is an async generator (it yields): a replay needs run() to return the "
                "workflow's output.",
                hint="Write `async def run(self, event, step)` (or `def run`) that returns its output.",
                id="django_workflows.E012",
            ))
        approvals = cls.approvals
        types = [approvals] if isinstance(approvals, str) else approvals
        if not isinstance(types, (list, tuple, set, frozenset)) or not all(is_event_type(t) for t in types):
            messages.append(Error(
                f"{where}.approvals must name event types (letters, digits, '-' and '_'), got {approvals!r}.",
                hint="Name the event types staff approve or reject in the admin, e.g. "
                     "approvals = {'manager-approval'}.",
                id="django_workflows.E010",
            ))
        problems = declared_events.declaration_problems(cls)
        for problem in problems:
            messages.append(Error(
                f"{where}.events: {problem}.",
                hint="events = {'manager-approval': {'permission': 'app.codename', 'approval': True, "
                     "'schema': {...}}, 'provider-webhook': {'webhook': True}}; see docs/guide/events.md.",
                id="django_workflows.E013",
            ))
        if isinstance(getattr(cls, "events", None), dict) and not problems:
            messages.extend(_undeclared_waits(cls, where))
        messages.extend(_schedule_problems(cls, where))
        messages.extend(_limit_problems(cls, where))
        if cls.run is WorkflowEntrypoint.run:
            messages.append(Error(
                f"{where} does not define run(self, event, step).",
                hint="Implement run(), or set abstract = True if it is a base class.",
                id="django_workflows.E008",
            ))
    return messages


@register(Tags.compatibility)
def check_unregistered_instances(app_configs=None, **kwargs):
    """Live instances of workflows this process does not know wait instead of running: list them."""
    from django_workflows.models import FINISHED_STATUSES, Instance

    try:
        rows = list(
            Instance.objects.exclude(status__in=FINISHED_STATUSES).exclude(workflow_name__in=registry.names())
            .values_list("workflow_name").annotate(n=Count("id")).order_by("workflow_name")
        )
    except (DatabaseError, RuntimeError):
        # Not migrated yet (``migrate`` runs the checks before it creates the table), unreachable, or
        # closed to this caller (pytest-django's tests without database access run ``check`` too):
        # a check reports what it finds, it never crashes manage.py.
        return []
    if not rows:
        return []
    listed = ", ".join(f"{name!r} ({count} instance{'' if count == 1 else 's'})" for name, count in rows)
    return [Warning(
        f"Instances of workflows that are not registered in this process wait for a worker that knows "
        f"them: {listed}.",
        hint="Deploy the code that defines these workflows to every worker (a rolling deploy finishes this "
             "by itself), or fix the workflows.py that failed to import (W009); they then resume where they "
             "stopped. To give one up, terminate() it.",
        id="django_workflows.W011",
    )]


@register(Tags.compatibility)
def check_sqlite(app_configs=None, **kwargs):
    from django_workflows.models import Instance

    alias = router.db_for_write(Instance)
    return sqlite_messages(alias, settings.DATABASES.get(alias, {}))


def sqlite_messages(alias: str, database: dict):
    if "sqlite" not in database.get("ENGINE", ""):
        return []
    options = database.get("OPTIONS", {})
    problems = []
    if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
        problems.append("transaction_mode is not 'IMMEDIATE'")
    if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
        problems.append("init_command does not set PRAGMA journal_mode=WAL")
    if not problems:
        return []
    return [Warning(
        f"The SQLite database {alias!r} that holds the workflow tables: {'; '.join(problems)}. A web server "
        "and a worker sharing it will hit 'database is locked'.",
        hint="In DATABASES[...]['OPTIONS'] set 'transaction_mode': 'IMMEDIATE', 'timeout': 20 and "
             "'init_command': 'PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;'.",
        id="django_workflows.W001",
    )]


def _schedule_problems(cls, where: str) -> list[Error]:
    """The class's cron schedules: croniter installed (E024), each expression (E021), the time zone
    (E022) and the catch-up policy (E023). A schedule the check refuses is not run by the worker."""
    if not schedules.declared_expressions(cls):
        return []
    try:
        schedules.require_croniter(f"{where}.schedules")
    except MissingExtra as exc:
        return [Error(f"{exc} Until it is, no worker creates this workflow's scheduled instances.",
                      hint="Install the [cron] extra, or remove the schedules.", id="django_workflows.E024")]
    messages = []
    for attribute, problem in schedules.problems(cls):
        if attribute == "schedules":
            messages.append(Error(
                f"{where}.schedules: {problem}. No worker creates its scheduled instances until it is fixed.",
                hint="Write 5 fields (minute hour day month weekday), 6 with seconds first, or an alias such "
                     "as '@daily', e.g. schedules = ['0 9 * * mon-fri'].",
                id="django_workflows.E021",
            ))
        elif attribute == "schedule_timezone":
            messages.append(Error(
                f"{where}.schedule_timezone: {problem}. No worker creates its scheduled instances until it is "
                "fixed.",
                hint="Give an IANA name such as 'Europe/Paris', or leave it out for 'UTC'.",
                id="django_workflows.E022",
            ))
        else:
            messages.append(Error(
                f"{where}.schedule_catch_up: {problem}. No worker creates its scheduled instances until it is "
                "fixed.",
                hint="'latest' (the default) runs the most recent missed slot, 'all' every missed slot (at most "
                     f"{schedules.MAX_CATCH_UP}), 'none' none.",
                id="django_workflows.E023",
            ))
    return messages


def _limit_problems(cls, where: str) -> list[Error]:
    """The class's ``concurrency`` (E026) and ``rate_limit`` (E027). A value refused here is not applied."""
    messages = []
    try:
        limits.parse_concurrency(getattr(cls, "concurrency", None), f"{where}.concurrency")
    except WorkflowConfigError as exc:
        messages.append(Error(
            f"{exc}. Until it is fixed, no concurrency limit applies to its instances.",
            hint="concurrency = 10 runs at most 10 instances of the workflow at once, across every worker.",
            id="django_workflows.E026",
        ))
    try:
        limits.parse_rate_limit(getattr(cls, "rate_limit", None), f"{where}.rate_limit")
    except WorkflowConfigError as exc:
        messages.append(Error(
            f"{exc}. Until it is fixed, no rate limit applies to its instances.",
            hint="rate_limit = '100/minute' starts at most 100 instances in any minute ('/second' and "
                 "'/hour' too).",
            id="django_workflows.E027",
        ))
    return messages


def _undeclared_waits(cls, where: str) -> list[Error]:
    """``step.wait_for_event`` calls whose literal types the class's ``events`` does not declare: they
    would wait out their timeout, since no sender may send those types."""
    from django_workflows.outline import parse_workflow_class

    messages = []
    for step in parse_workflow_class(cls).steps():
        undeclared = [t for t in step.event_types or () if t not in cls.events]
        if undeclared:
            messages.append(Error(
                f"{where}.run waits for {', '.join(map(repr, undeclared))} (step {step.label!r}, line "
                f"{step.lineno}), which its events do not declare: no one could send it.",
                hint="Declare the type in events, or wait for a declared one.",
                id="django_workflows.E014",
            ))
    return messages
