"""System checks: misconfiguration reported by ``manage.py check``, each with a stable id and a hint."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, router
from django.db.models import Count

from django_workflows.foundations.conf import DEFAULTS, HARD_STEP_LIMIT, workflow_settings
from django_workflows.shared.definition import WorkflowEntrypoint, is_async_generator, registry
from django_workflows.errors import WorkflowConfigError
from django_workflows.shared.options import (
    WorkflowOptions,
    cpu_time_limit_error,
    parse_cpu_time_limit,
    parse_version,
    version_error,
)
from django_workflows.engine.policy import validate_config
from django_workflows.shared.serialization import round_trip_problem
from django_workflows.shared.webhook_secrets import MIN_SECRET_LENGTH, secret_problem, secret_weakness

SIZE_SETTINGS = ("MAX_STEP_RESULT_SIZE", "MAX_EVENT_PAYLOAD_SIZE", "MAX_PARAMS_SIZE", "LARGE_VALUE_THRESHOLD",
                 "MAX_PENDING_EVENTS",
                 "MAX_PENDING_EVENTS_PER_SENDER", "MAX_PENDING_EVENTS_PER_TYPE",
                 "LEASE_SECONDS", "POISON_LIMIT", "WAKE_BATCH", "REPLAY_BATCH", "REPLAY_THREADS", "RETENTION_BATCH",
                 "REDISPATCH_SECONDS", "HEARTBEAT_STALE_SECONDS", "WEDGE_SECONDS")
# Counts whose default, None, is worked out from the machine.
SIZED_BY_DEFAULT = ("REPLAY_THREADS",)
INTERVAL_SETTINGS = ("WAKE_INTERVAL", "SWEEP_INTERVAL", "IDLE_RECHECK_SECONDS")


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@register(Tags.compatibility)
def check_settings(app_configs=None, **kwargs):
    messages: list[CheckMessage] = []
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
        if key in SIZED_BY_DEFAULT and getattr(workflow_settings, key) is None:
            continue
        if not _positive_int(getattr(workflow_settings, key)):
            messages.append(Error(
                f"DJANGO_WORKFLOWS[{key!r}] must be a positive whole number, got {getattr(workflow_settings, key)!r}.",
                hint=f"The default is {DEFAULTS[key]}.",
                id="django_workflows.E006",
            ))
    storage = workflow_settings.LARGE_VALUE_STORAGE
    if not isinstance(storage, str) or storage not in settings.STORAGES:
        messages.append(Error(
            f"DJANGO_WORKFLOWS['LARGE_VALUE_STORAGE'] is {storage!r}, which is not an alias in STORAGES: large "
            "step results, outputs and event payloads could not be written.",
            hint=f"Name one of {sorted(settings.STORAGES)} (the default is 'default'), or add it to STORAGES.",
            id="django_workflows.E030",
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
        parse_cpu_time_limit(workflow_settings.CPU_TIME_LIMIT, "DJANGO_WORKFLOWS['CPU_TIME_LIMIT']")
    except WorkflowConfigError as exc:
        messages.append(cpu_time_limit_error(exc, f"the default is {DEFAULTS['CPU_TIME_LIMIT']!r}"))
    if workflow_settings.VERSION is not None:
        try:
            parse_version(workflow_settings.VERSION, "DJANGO_WORKFLOWS['VERSION']")
        except WorkflowConfigError as exc:
            messages.append(version_error(exc, "None records no version"))
    return messages


@register(Tags.compatibility)
def check_workflows(app_configs=None, **kwargs):
    messages: list[CheckMessage] = []
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
        # What is wrong with the class's attributes is found where they are read, once, for every reader.
        options = WorkflowOptions.of(cls)
        messages.extend(options.problems)
        where = options.where
        if is_async_generator(cls):
            messages.append(Error(
                f"{where}.run is an async generator (it yields): a replay needs run() to return the "
                "workflow's output.",
                hint="Write `async def run(self, event, step)` (or `def run`) that returns its output.",
                id="django_workflows.E012",
            ))
        if options.events_declared_rightly:
            messages.extend(_undeclared_waits(cls, options))
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


def _undeclared_waits(cls, options: WorkflowOptions) -> list[Error]:
    """``step.wait_for_event`` calls whose literal types the class's ``events`` does not declare: they
    would wait out their timeout, since no sender may send those types."""
    from django_workflows.reading.outline import parse_workflow_class

    messages = []
    # Called only when the class declares its events (WorkflowOptions.events_declared_rightly).
    declared = options.events or {}
    for step in parse_workflow_class(cls).steps():
        undeclared = [t for t in step.event_types or () if t not in declared]
        if undeclared:
            messages.append(Error(
                f"{options.where}.run waits for {', '.join(map(repr, undeclared))} (step {step.label!r}, "
                f"line {step.lineno}), which its events do not declare: no one could send it.",
                hint="Declare the type in events, or wait for a declared one.",
                id="django_workflows.E014",
            ))
    return messages


@register(Tags.security)
def check_webhook_secrets(app_configs=None, **kwargs):
    """``WEBHOOK_SECRETS``: a dict of workflow name to a secret long enough; every workflow that declares
    webhook-only event types has one; every name is a workflow's."""
    secrets = workflow_settings.WEBHOOK_SECRETS
    if not isinstance(secrets, dict):
        return [Error(f"DJANGO_WORKFLOWS['WEBHOOK_SECRETS'] must be a dict of workflow name to secret, got "
                      f"{type(secrets).__name__}.",
                      hint="WEBHOOK_SECRETS = {'payment-approval': os.environ['PAYMENT_WEBHOOK_SECRET']}.",
                      id="django_workflows.E028")]
    messages: list[CheckMessage] = []
    for name, secret in secrets.items():
        problem = secret_problem(secret)
        hint = (f"Use the secret your provider gave you, or one from secrets.token_hex(32): at least "
                f"{MIN_SECRET_LENGTH} characters.")
        if problem is not None:
            messages.append(Error(f"DJANGO_WORKFLOWS['WEBHOOK_SECRETS'][{name!r}] {problem}.",
                                  hint=f"{hint} Until then its deliveries are refused.", id="django_workflows.E029"))
        elif (weakness := secret_weakness(secret)) is not None:
            messages.append(Warning(f"DJANGO_WORKFLOWS['WEBHOOK_SECRETS'][{name!r}] {weakness}.", hint=hint,
                                    id="django_workflows.W113"))
        if name not in registry.names():
            messages.append(Warning(
                f"DJANGO_WORKFLOWS['WEBHOOK_SECRETS'] names {name!r}, which no workflow is called.",
                hint="Correct the name to the workflow's (its class's name attribute), or remove the entry.",
                id="django_workflows.W111"))
    for cls in registry.all():
        options = WorkflowOptions.of(cls)
        webhook_types = sorted(rule.type for rule in (options.events or {}).values() if rule.webhook)
        if webhook_types and options.name not in secrets:
            messages.append(Warning(
                f"Workflow {options.name!r} declares webhook event types {webhook_types} but "
                f"DJANGO_WORKFLOWS['WEBHOOK_SECRETS'] has no secret for it: every delivery is refused.",
                hint=f"Add WEBHOOK_SECRETS = {{{options.name!r}: <the provider's signing secret>}}.",
                id="django_workflows.W112"))
    return messages


@register(Tags.compatibility)
def check_serializer(app_configs=None, **kwargs):
    """``SERIALIZER``: importable, and every one of its own ``sample_values()`` comes back from the journal
    equal and of the same type; a serializer that loses types would change what ``run()`` gets on replays."""
    try:
        codec = workflow_settings.serializer()
        samples = list(codec.sample_values())
        codec.reserved_key, codec.marker  # noqa: B018  (what the engine reads of every serializer)
    except Exception as exc:  # the project's dotted path and class: whatever it raises is the problem
        return [Error(f"DJANGO_WORKFLOWS['SERIALIZER'] ({workflow_settings.SERIALIZER!r}) cannot be used: "
                      f"{type(exc).__name__}: {exc}.",
                      hint="Name a class like django_workflows.typed_values.TaggedSerializer (dump, load, "
                           "sample_values, reserved_key, marker), or leave the setting out.",
                      id="django_workflows.E035")]
    messages: list[CheckMessage] = []
    for value in samples:
        problem = round_trip_problem(codec, value)
        if problem is not None:
            messages.append(Error(
                f"DJANGO_WORKFLOWS['SERIALIZER'] does not round-trip its own sample {value!r}: it {problem}.",
                hint="Fix its dump()/load() for that type: replays would give run() another value than the "
                     "first run did.",
                id="django_workflows.E036"))
    return messages
