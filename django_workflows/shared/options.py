"""A workflow class's options, read once: what its ``step_limit``, ``cpu_time_limit``, ``version``,
``name``, ``approvals``, ``events``, ``schedules`` (with ``schedule_timezone`` and ``schedule_catch_up``),
``concurrency`` and ``rate_limit`` (with their keys), ``priority``, ``queue`` and ``timeout`` come to,
and what is wrong with them.

``WorkflowOptions.of(cls)`` reads a class's attributes the first time it is asked, as a Django model has
its ``_meta``, and keeps it on the class (registering the class again reads them again). Every reader
takes its values from here (the replay, the claim, the schedules, create, the senders of events,
``describe``) and the system checks report its ``problems``: every reader is told the same.

A value the checks refuse never stops the registry from loading. Where one can be done without, it is
left out, as if not declared (the setting or no limit applies); where it cannot (the CPU time limit a
replay runs under, the version an instance records), reading it raises the check's complaint.

The values that follow a setting when the class gives none (the step limit, the CPU time limit, the
version) read the setting each time, so that ``override_settings`` is seen without reading it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.core.checks import Error

from django_workflows.shared import cron, deadlines, event_rules, limits, routing
from django_workflows.foundations.conf import HARD_STEP_LIMIT, MAX_CPU_TIME_LIMIT, workflow_settings
from django_workflows.shared.definition import OPTIONS_ATTRIBUTE, WorkflowEntrypoint, registry
from django_workflows.shared.durations import parse_duration
from django_workflows.errors import InvalidParams, InvalidStepInput, MissingExtra, WorkflowConfigError
from django_workflows.foundations.validation import is_event_type, is_workflow_name

MAX_VERSION = 100
"""The longest version an instance records (``Instance.version``)."""

_CPU_TIME_LIMIT_SETTING = "DJANGO_WORKFLOWS['CPU_TIME_LIMIT']"
_VERSION_SETTING = "DJANGO_WORKFLOWS['VERSION']"

# An attribute's parsed value (a duration, a version, a concurrency, a rate).
_Parsed = TypeVar("_Parsed")


def parse_cpu_time_limit(value: Any, where: str) -> timedelta:
    """``value`` as a CPU time limit: a duration (milliseconds, as in Cloudflare's ``limits.cpu_ms``, or
    "N unit(s)") above zero and at most ``MAX_CPU_TIME_LIMIT``; a ``WorkflowConfigError`` naming
    ``where`` otherwise."""
    try:
        limit = parse_duration(value, what=where)
    except InvalidStepInput as exc:
        raise WorkflowConfigError(str(exc)) from None
    if not timedelta(0) < limit <= MAX_CPU_TIME_LIMIT:
        most = MAX_CPU_TIME_LIMIT.total_seconds()
        raise WorkflowConfigError(f"{where}: must be more than zero and at most {most / 60:g} minutes "
                                  f"({most * 1000:.0f} ms), got {value!r}")
    return limit


def parse_version(value: Any, where: str) -> str:
    """``value`` as a version: a string (or a whole number, written as one) of 1 to ``MAX_VERSION``
    printable characters; a ``WorkflowConfigError`` naming ``where`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_VERSION or not value.isprintable():
        raise WorkflowConfigError(f"{where}: must be a string of 1 to {MAX_VERSION} printable characters "
                                  f"(or a whole number), got {value!r}")
    return value


def cpu_time_limit_error(exc: WorkflowConfigError, hint: str) -> Error:
    """Check E019, about the class's ``cpu_time_limit`` or the setting's."""
    return Error(
        f"{exc}. A replay that uses more CPU time than this errors its instance.",
        hint=f"Give milliseconds (30000) or a duration ('30 seconds'), at most '5 minutes'; {hint}.",
        id="django_workflows.E019",
    )


def version_error(exc: WorkflowConfigError, hint: str) -> Error:
    """Check E020, about the class's ``version`` or the setting's."""
    return Error(
        f"{exc}. Creating an instance raises this error.",
        hint=f"Give a release name or number, such as '2025.06.1' or 3; {hint}.",
        id="django_workflows.E020",
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class WorkflowOptions:
    """What a workflow class's attributes come to. Built by ``WorkflowOptions.of(cls)``, not directly."""

    def __init__(self, workflow_class: type[WorkflowEntrypoint]) -> None:
        self.workflow_class = workflow_class
        self.name = workflow_class.name
        self.where = f"{workflow_class.__module__}.{workflow_class.__qualname__}"
        self.problems: list[Error] = []
        """What ``manage.py check`` reports about these options, in the order it reports them."""
        # {attribute: the check's complaint}, raised by a reader that cannot do without the value.
        self._refused: dict[str, str] = {}
        self.own_step_limit = self._read_step_limit(workflow_class.step_limit)
        self.own_cpu_time_limit = self._read_or_refuse(
            "cpu_time_limit", workflow_class.cpu_time_limit, parse_cpu_time_limit,
            lambda exc: cpu_time_limit_error(exc, "leave it out for the CPU_TIME_LIMIT setting"))
        self.own_version = self._read_or_refuse(
            "version", workflow_class.version, parse_version,
            lambda exc: version_error(exc, "leave it out for the VERSION setting"))
        self._check_name()
        named = self._read_approvals(workflow_class.approvals)
        self.events = self._read_events(workflow_class.events, named)
        self.approval_types = named | {rule.type for rule in (self.events or {}).values() if rule.approval}
        """The types the admin's Approve and Reject buttons send: those ``approvals`` names, and those
        ``events`` declares ``approval``."""
        self._read_schedules(workflow_class)
        self.limits = self._read_limits(workflow_class.concurrency, workflow_class.rate_limit)
        self.timeout = self._read_timeout(workflow_class.timeout)
        """The deadline a new instance is given, from its creation; None: none (or check E037 refuses it)."""
        self.priority: int = self._read_limit(
            routing.parse_priority, "priority", workflow_class.priority, "priority 0",
            "priority = 5 starts its instances before those of lower priority in the same queue.",
            id="django_workflows.E042") or routing.LOWEST_PRIORITY
        """The priority of a new instance that create() gives none."""
        self.queue: str = self._read_limit(
            routing.parse_queue, "queue", workflow_class.queue, "the 'default' queue",
            "queue = 'heavy' routes its replays to workers started with --queues heavy.",
            id="django_workflows.E043") or routing.DEFAULT_QUEUE
        """The queue of a new instance that create() gives none."""

    @classmethod
    def of(cls, workflow_class: type[WorkflowEntrypoint]) -> WorkflowOptions:
        """The class's options, read the first time they are asked for and kept on the class (its
        subclasses have their own)."""
        options = workflow_class.__dict__.get(OPTIONS_ATTRIBUTE)
        if options is None:
            # Two threads asking at once both read the class and keep equal options: no lock needed.
            options = cls(workflow_class)
            setattr(workflow_class, OPTIONS_ATTRIBUTE, options)
        return options

    def __repr__(self) -> str:
        return f"<WorkflowOptions {self.where}>"

    # -- the values, with the settings applied ---------------------------------------------------------

    @property
    def step_limit(self) -> int:
        """The steps an instance may take: the class's ``step_limit`` (a larger one is lowered to
        ``HARD_STEP_LIMIT``), else the ``STEP_LIMIT`` setting."""
        return self.own_step_limit if self.own_step_limit is not None else workflow_settings.STEP_LIMIT

    @property
    def cpu_time_limit(self) -> timedelta:
        """The CPU time one replay may use: the class's ``cpu_time_limit``, else the ``CPU_TIME_LIMIT``
        setting. Either one that check E019 refuses raises ``WorkflowConfigError``: no replay runs
        without a limit."""
        if "cpu_time_limit" in self._refused:
            raise WorkflowConfigError(self._refused["cpu_time_limit"])
        if self.own_cpu_time_limit is not None:
            return self.own_cpu_time_limit
        return workflow_settings.derived("CPU_TIME_LIMIT", lambda: parse_cpu_time_limit(
            workflow_settings.CPU_TIME_LIMIT, _CPU_TIME_LIMIT_SETTING))

    @property
    def version(self) -> str:
        """The version a new instance records: the class's own ``version`` (what its code says of
        itself) wins over the ``VERSION`` setting (what the deploy says of all the code); "" when neither
        is set. Either one that check E020 refuses raises ``WorkflowConfigError``."""
        if "version" in self._refused:
            raise WorkflowConfigError(self._refused["version"])
        if self.own_version is not None:
            return self.own_version
        deployed = workflow_settings.VERSION
        return "" if deployed is None else parse_version(deployed, _VERSION_SETTING)

    @property
    def events_declared_rightly(self) -> bool:
        """Whether the class declares ``events`` and check E013 finds nothing wrong with them."""
        return self.events is not None and not any(p.id == "django_workflows.E013" for p in self.problems)

    # -- reading the attributes --------------------------------------------------------------------------

    def _refuse(self, attribute: str, exc: WorkflowConfigError, problem: Error) -> None:
        self._refused[attribute] = str(exc)
        self.problems.append(problem)

    def _read_step_limit(self, value: Any) -> int | None:
        if value is None:
            return None
        if _whole(value) and 0 < value <= HARD_STEP_LIMIT:
            return value
        self.problems.append(Error(
            f"{self.where}.step_limit must be a whole number from 1 to {HARD_STEP_LIMIT}, got {value!r}.",
            hint="Lower it, or split the work across several instances.",
            id="django_workflows.E018",
        ))
        # The engine has always run a larger limit as the hard one; anything else leaves the setting's.
        return HARD_STEP_LIMIT if _whole(value) and value > HARD_STEP_LIMIT else None

    def _read_or_refuse(self, attribute: str, value: Any, parse: Callable[[Any, str], _Parsed],
                        problem: Callable[[WorkflowConfigError], Error]) -> _Parsed | None:
        """``parse`` of the class's ``attribute`` (None when it is not set). A value it refuses is
        reported, and a reader that cannot do without the value raises the refusal (``_refused``)."""
        if value is None:
            return None
        try:
            return parse(value, f"{self.where}.{attribute}")
        except WorkflowConfigError as exc:
            self._refuse(attribute, exc, problem(exc))
            return None

    def _check_name(self) -> None:
        if not isinstance(self.name, str) or not is_workflow_name(self.name):
            self.problems.append(Error(
                f"{self.where}.name must be 1 to 64 letters, digits, '_' or '-', not starting with '-' (it "
                f"is part of the API's URLs and of every instance), got {self.name!r}.",
                hint="Set name = 'my-workflow' on the class, or leave it out to use the class name in "
                     "kebab-case.",
                id="django_workflows.E007",
            ))

    def _read_approvals(self, value: Any) -> frozenset[str]:
        types = [value] if isinstance(value, str) else value
        if isinstance(types, (list, tuple, set, frozenset)) and all(is_event_type(t) for t in types):
            return frozenset(types)
        self.problems.append(Error(
            f"{self.where}.approvals must name event types (letters, digits, '-' and '_'), got {value!r}.",
            hint="Name the event types staff approve or reject in the admin, e.g. "
                 "approvals = {'manager-approval'}.",
            id="django_workflows.E010",
        ))
        # Those that are event types still name the waits the admin lists as waiting for a person.
        if not isinstance(types, (list, tuple, set, frozenset)):
            return frozenset()
        return frozenset(t for t in types if is_event_type(t))

    def _read_events(self, value: Any, approvals: frozenset[str]) -> dict[str, event_rules.EventRule] | None:
        for problem in event_rules.problems(value, sorted(approvals)):
            self.problems.append(Error(
                f"{self.where}.events: {problem}.",
                hint="events = {'manager-approval': {'permission': 'app.codename', 'approval': True, "
                     "'schema': {...}}, 'provider-webhook': {'webhook': True}}; see docs/guide/events.md.",
                id="django_workflows.E013",
            ))
        return event_rules.rules(value)

    def _read_schedules(self, cls: type[WorkflowEntrypoint]) -> None:
        self.schedule_expressions = cron.expressions(cls.schedules)
        """The class's ``schedules`` as written, a lone string as a list of one."""
        self.schedule_timezone = cls.schedule_timezone or cron.DEFAULT_TIMEZONE
        self.schedule_catch_up = cls.schedule_catch_up or cron.DEFAULT_CATCH_UP
        self.schedules: list[cron.ScheduleSpec] = []
        """The schedules a worker runs: none while any of them is refused (``schedules_refused``)."""
        self.schedules_refused: str | None = None
        """Why no worker runs the class's schedules (croniter missing, checks E021 to E023)."""
        if not self.schedule_expressions:
            return
        try:
            self.schedules = cron.specs(self.name, self.schedule_expressions, self.schedule_timezone,
                                             self.schedule_catch_up)
        except (cron.InvalidSchedule, MissingExtra) as exc:
            self.schedules_refused = str(exc)
        try:
            cron.require_croniter(f"{self.where}.schedules")
        except MissingExtra as exc:
            self.problems.append(Error(
                f"{exc} Until it is, no worker creates this workflow's scheduled instances.",
                hint="Install the [cron] extra, or remove the schedules.", id="django_workflows.E024"))
            return
        for attribute, problem in cron.problems(self.schedule_expressions, self.schedule_timezone,
                                                     self.schedule_catch_up):
            self.problems.append(self._schedule_problem(attribute, problem))

    def _schedule_problem(self, attribute: str, problem: str) -> Error:
        unrun = "No worker creates its scheduled instances until it is fixed."
        if attribute == "schedules":
            return Error(
                f"{self.where}.schedules: {problem}. {unrun}",
                hint="Write 5 fields (minute hour day month weekday), 6 with seconds first, or an alias such "
                     "as '@daily', e.g. schedules = ['0 9 * * mon-fri'].",
                id="django_workflows.E021",
            )
        if attribute == "schedule_timezone":
            return Error(
                f"{self.where}.schedule_timezone: {problem}. {unrun}",
                hint="Give an IANA name such as 'Europe/Paris', or leave it out for 'UTC'.",
                id="django_workflows.E022",
            )
        return Error(
            f"{self.where}.schedule_catch_up: {problem}. {unrun}",
            hint="'latest' (the default) runs the most recent missed slot, 'all' every missed slot (at most "
                 f"{cron.MAX_CATCH_UP}), 'none' none.",
            id="django_workflows.E023",
        )

    def _read_limits(self, concurrency: Any, rate_limit: Any) -> limits.WorkflowLimits | None:
        """The class's limits, or None when it declares none: a value that check E026/E027 refuses is
        left out, as if not declared, and so is a key that check E041 refuses (with its limit)."""
        concurrency, concurrency_key = self._read_key("concurrency", concurrency)
        rate_limit, rate_key = self._read_key("rate_limit", rate_limit)
        if concurrency_key and rate_key and concurrency_key.declared != rate_key.declared:
            self.problems.append(Error(
                f"{self.where}: concurrency is keyed by {concurrency_key} and rate_limit by {rate_key}; an "
                "instance has one limit key. Until it is fixed, neither limit applies to its instances.",
                hint="Key both limits alike, or leave the key out of one (that limit then counts every "
                     "instance of the workflow).", id="django_workflows.E041"))
            return None
        concurrency = self._read_limit(
            limits.parse_concurrency, "concurrency", concurrency, "no concurrency limit",
            "concurrency = 10 runs at most 10 instances of the workflow at once, across every worker; "
            "{'limit': 2, 'key': 'params.customer_id'}, at most 2 per customer.",
            id="django_workflows.E026")
        rate = self._read_limit(
            limits.parse_rate_limit, "rate_limit", rate_limit, "no rate limit",
            "rate_limit = '100/minute' starts at most 100 instances in any minute ('/second' and '/hour' too); "
            "{'limit': '100/minute', 'key': 'params.customer_id'}, per customer.",
            id="django_workflows.E027")
        if concurrency is None and rate is None:
            return None
        concurrency_keyed = concurrency is not None and concurrency_key is not None
        rate_keyed = rate is not None and rate_key is not None
        key = concurrency_key if concurrency_keyed else rate_key if rate_keyed else None
        return limits.WorkflowLimits(concurrency, rate, key, concurrency_keyed, rate_keyed)

    def _read_key(self, attribute: str, value: Any) -> tuple[Any, limits.LimitKey | None]:
        """The class's ``attribute`` split into its limit and its key (``{"limit": 2, "key": ...}``); a
        form check E041 refuses leaves the limit out."""
        try:
            return limits.split_keyed(value, f"{self.where}.{attribute}")
        except WorkflowConfigError as exc:
            self.problems.append(Error(
                f"{exc}. Until it is fixed, no {attribute} applies to its instances.",
                hint=f"{attribute} = {{'limit': ..., 'key': 'params.customer_id'}}, or a callable "
                     "(params, tags) -> key for 'key'.", id="django_workflows.E041"))
            return None, None

    def _read_limit(self, parse: Callable[[Any, str], _Parsed], attribute: str, value: Any, lifted: str,
                    hint: str, *, id: str) -> _Parsed | None:  # noqa: A002 (the check's id, as Error names it)
        """``parse`` of the class's ``attribute``; a value it refuses is reported and left out."""
        try:
            return parse(value, f"{self.where}.{attribute}")
        except WorkflowConfigError as exc:
            self.problems.append(Error(f"{exc}. Until it is fixed, {lifted} applies to its instances.",
                                       hint=hint, id=id))
            return None

    def _read_timeout(self, value: Any) -> timedelta | None:
        """The class's ``timeout``; a value check E037 refuses is left out, as if not declared: an
        instance without a deadline is what the class had before it gave one."""
        if value is None:
            return None
        try:
            return deadlines.parse_timeout(value, f"{self.where}.timeout")
        except InvalidParams as exc:
            self.problems.append(Error(
                f"{exc} Until it is fixed, its new instances have no deadline.",
                hint="timeout = '7 days' ends an instance errored with WorkflowTimeoutError 7 days after it "
                     "was created; give milliseconds, 'N unit(s)' or a timedelta.",
                id="django_workflows.E037"))
            return None


def place(workflow_class: type[WorkflowEntrypoint], params: Any, tags: Mapping[str, str] | None, now: datetime, *,
          priority: Any = None, queue: Any = None, with_key: bool = True) -> routing.Placement:
    """Where and in what order a new instance of ``workflow_class`` runs: the queue and priority given
    to ``create()``, else the class's; its turn; and its limit key, if its workflow's limits are keyed.
    A value it cannot take (a priority out of range, a queue that no class names and QUEUES does not
    list, params without the key) is ``InvalidParams``, which creates nothing."""
    options = WorkflowOptions.of(workflow_class)
    try:
        chosen_priority = options.priority if priority is None else routing.parse_priority(priority, "priority")
        chosen_queue = options.queue if queue is None else routing.parse_queue(queue, "queue")
    except WorkflowConfigError as exc:
        raise InvalidParams(f"create(): {exc}.") from None
    if chosen_queue not in queues_in_use():
        raise InvalidParams(
            f"create(): queue {chosen_queue!r} is not one of this project's queues "
            f"({', '.join(sorted(queues_in_use()))}): no worker would be started for it. List it in "
            "DJANGO_WORKFLOWS['QUEUES'], or name it on a workflow class.")
    own = options.limits
    key = "" if own is None or own.key is None or not with_key else own.key.of(params, tags or {}, options.name)
    return routing.Placement(chosen_queue, chosen_priority, routing.turn(now, chosen_priority, routing.aging()), key)


def queues_in_use() -> frozenset[str]:
    """The queues of this project: 'default', those the registered workflow classes name, and those the
    QUEUES setting lists. Replays are routed by queue only when there are several. Read at every
    create(): worked out once per generation of the registry, until the settings change."""
    return workflow_settings.derived(f"queues in use, registry generation {registry.generation}", lambda: frozenset(
        {routing.DEFAULT_QUEUE, *workflow_settings.QUEUES, *(WorkflowOptions.of(cls).queue for cls in registry.all())}))


def limited() -> dict[str, limits.WorkflowLimits]:
    """``{workflow name: its limits}`` for the workflows registered in this process that declare any:
    empty when none does, and the claim then costs what it always did. Read at every create() and
    replay: worked out once per generation of the registry (registering a class again reads its options
    again)."""
    return dict(workflow_settings.derived(f"limits, registry generation {registry.generation}", lambda: {
        cls.name: own for cls in registry.all() if (own := WorkflowOptions.of(cls).limits) is not None}))
