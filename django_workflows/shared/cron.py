"""Cron schedules of a workflow class: which slots an expression names, in which time zone, and what a
worker creates for them.

    class NightlyReport(WorkflowEntrypoint):
        schedules = ["0 9 * * mon-fri", "30 18 * * fri"]
        schedule_timezone = "Europe/Paris"      # default "UTC", as Cloudflare's cron triggers
        schedule_catch_up = "latest"            # after downtime: "latest" (default), "all" or "none"

A *slot* is an instant, in UTC, that one expression names. Its instance's id is derived from the
expression, the time zone and the slot (``cron-<key>-<YYYYMMDDTHHMMSSZ>``), so that however many
workers handle a slot, the database holds one instance for it: the unique (workflow, id) pair absorbs
a second insert.

Expressions are read by ``croniter`` (the ``[cron]`` extra), on local wall-clock times of the
schedule's time zone: five fields (minute hour day month weekday), or six with seconds first
(``"*/10 * * * * *"``: every ten seconds), or an alias (``@hourly``, ``@daily``, ``@weekly``,
``@monthly``, ``@yearly``). Where the time zone changes its clocks:

- a local time that does not exist (the hour skipped when clocks go forward) is run at the instant
  the clocks jump over it (02:30 in Paris on the last Sunday of March runs at 03:00 CEST); slots that
  fall together there are one slot;
- a local time that happens twice (the hour repeated when clocks go back) is run once, at its first
  occurrence.

So each wall-clock time an expression names runs once: an hourly expression runs 23 times on the day
the clocks go forward and 24 times on the 25-hour day they go back. For "every N minutes of real time"
whatever the season, use ``schedule_timezone = "UTC"`` (the default).

This module is plain computation over the class attributes (``options`` reads them once, through
here): nothing here touches the database.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django_workflows.errors import WorkflowConfigError, require_extra

DEFAULT_TIMEZONE = "UTC"
CATCH_UP_POLICIES = ("latest", "all", "none")
DEFAULT_CATCH_UP = "latest"

ON_TIME = timedelta(seconds=60)
"""A slot created within this long of its time is on time, whatever the catch-up policy: a worker that
was busy, or a loop that woke a little late, misses nothing. Older due slots are *missed* (no worker was
there to create them), and the policy says which of them still run."""

MAX_CATCH_UP = 100
"""The most slots one schedule creates in one round (``"all"`` after a long downtime creates the most
recent ones, as ``create_batch`` takes 100 instances)."""

ID_PREFIX = "cron-"
ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


class InvalidSchedule(WorkflowConfigError):
    """A cron expression, time zone or catch-up policy that cannot be used."""


def require_croniter(part: str = "Cron schedules") -> None:
    require_extra("croniter", "cron", part)


def normalize(expression: str) -> str:
    """One space between fields, lower case: ``"0  9 * * MON-FRI"`` and ``"0 9 * * mon-fri"`` are one
    schedule."""
    return " ".join(expression.split()).lower()


def schedule_key(expression: str, timezone: str) -> str:
    """Ten hex characters naming an expression in a time zone: the middle of its slots' instance ids."""
    text = f"{normalize(expression)}\n{timezone}"
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def slot_instance_id(key: str, slot: datetime) -> str:
    """``cron-<key>-20260302T080000Z``: 32 characters, within the instance-id rule."""
    return f"{ID_PREFIX}{key}-{slot.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def slot_params(expression: str, timezone: str, slot: datetime) -> dict:
    """The params of a slot's instance. ``cron`` and ``scheduledTime`` (milliseconds since the epoch) are
    what Cloudflare's ``ScheduledController`` carries; ``scheduled_time`` is the same instant in ISO 8601."""
    slot = slot.astimezone(UTC)
    return {"cron": expression, "scheduled_time": slot.isoformat(),
            "scheduledTime": int(slot.timestamp()) * 1000, "timezone": timezone}


def _zone(timezone: str):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(timezone, str) or not timezone:
        raise InvalidSchedule(f"schedule_timezone must be an IANA time zone name such as 'Europe/Paris', "
                              f"got {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(f"schedule_timezone {timezone!r} is not a time zone this machine knows (an "
                              "IANA name such as 'Europe/Paris'; install the tzdata package where the system "
                              "has none)") from None


def _floor_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


class CronSchedule:
    """One expression in one time zone: its slots, as UTC instants, before and after a moment."""

    def __init__(self, expression: str, timezone: str = DEFAULT_TIMEZONE):
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidSchedule(f"A schedule must be a cron expression string, got {expression!r}")
        self.expression = normalize(expression)
        self.timezone = timezone
        self.zone = _zone(timezone)
        fields = self.expression.split()
        if fields[0].startswith("@"):
            if fields[0] not in ALIASES or len(fields) != 1:
                raise InvalidSchedule(f"Cron expression {expression!r}: the aliases are {', '.join(ALIASES)}")
        elif len(fields) not in (5, 6):
            raise InvalidSchedule(
                f"Cron expression {expression!r} has {len(fields)} fields: give 5 (minute hour day month "
                "weekday) or 6 (second minute hour day month weekday)")
        require_croniter()
        from croniter import croniter

        self._croniter = croniter
        self.seconds = len(fields) == 6
        try:
            valid = croniter.is_valid(self.expression, second_at_beginning=True)
        except Exception:  # croniter raises more than one kind for what it cannot read
            valid = False
        if not valid:
            raise InvalidSchedule(f"Cron expression {expression!r} is not one croniter can read")
        self.key = schedule_key(self.expression, timezone)
        # An expression that names no time at all ("0 9 30 2 *") is refused now, not at its first slot.
        self.after(datetime(2000, 1, 1, tzinfo=UTC))

    def __repr__(self) -> str:
        return f"<CronSchedule {self.expression!r} {self.timezone}>"

    def _iterator(self, naive_start: datetime):
        return self._croniter(self.expression, naive_start, ret_type=datetime, second_at_beginning=True)

    def local(self, moment: datetime) -> datetime:
        return moment.astimezone(self.zone)

    def to_utc(self, naive: datetime) -> datetime:
        """The instant of a local wall-clock time: the first occurrence of a time that happens twice, and
        the instant the clocks jump over a time that does not exist."""
        aware = naive.replace(tzinfo=self.zone, fold=0)
        instant = aware.astimezone(UTC)
        if instant.astimezone(self.zone).replace(tzinfo=None) == naive:
            return instant
        # In a gap: fold=0 reads it with the offset before the jump (an instant after the jump), fold=1
        # with the offset after it (an instant before). The jump is the first whole second between them
        # whose local reading is past ``naive``.
        low = naive.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        high = instant
        while (high - low) > timedelta(seconds=1):
            middle = _floor_second(low + (high - low) / 2)
            if middle <= low:
                middle = low + timedelta(seconds=1)
            if middle.astimezone(self.zone).replace(tzinfo=None) >= naive:
                high = middle
            else:
                low = middle
        return high

    def _naive_bound(self, moment: datetime) -> datetime:
        """The latest local reading that may belong to a slot at or before ``moment``: its own reading,
        or, in the second pass of a repeated hour, the reading before the clocks went back."""
        local = self.local(moment)
        if local.fold:
            offset = local.replace(fold=0).utcoffset()
            assert offset is not None  # a reading in the schedule's time zone
            return (moment + offset).replace(tzinfo=None)
        return local.replace(tzinfo=None)

    def after(self, moment: datetime) -> datetime:
        """The first slot strictly after ``moment``."""
        iterator = self._iterator(self.local(moment).replace(tzinfo=None))
        try:
            while True:
                slot = self.to_utc(iterator.get_next(datetime))
                if slot > moment:
                    return slot
        except Exception as exc:  # croniter's CroniterBadDateError: no such date within its search
            if isinstance(exc, InvalidSchedule):
                raise
            raise InvalidSchedule(f"Cron expression {self.expression!r} names no time that exists "
                                  f"({type(exc).__name__}: {exc})") from None

    def upcoming(self, moment: datetime, count: int) -> list[datetime]:
        """The ``count`` slots after ``moment``."""
        slots: list[datetime] = []
        while len(slots) < count:
            moment = self.after(moment)
            slots.append(moment)
        return slots

    def at_or_before(self, moment: datetime) -> Iterator[datetime]:
        """The slots at or before ``moment``, newest first (endless: the caller stops)."""
        start = self._naive_bound(moment) + timedelta(microseconds=1)
        iterator = self._iterator(start)
        previous = None
        while True:
            slot = self.to_utc(iterator.get_prev(datetime))
            if slot > moment or slot == previous:
                continue  # the second pass of a repeated hour, or slots that fell together in a gap
            previous = slot
            yield slot


@dataclass
class Plan:
    """What one round does for a schedule whose next slot came due: the slots to create (oldest first),
    whether it skipped missed ones, and the schedule's next slot afterwards."""

    slots: list[datetime] = field(default_factory=list)
    skipped: bool = False
    next_slot: datetime | None = None


def plan(cron: CronSchedule, catch_up: str, next_slot: datetime, now: datetime,
         on_time: timedelta = ON_TIME) -> Plan:
    """The slots from ``next_slot`` (the oldest not yet dealt with) to ``now`` that are created:

    - slots at most ``on_time`` old, always;
    - ``"latest"``: also the most recent due slot when none is on time (missed slots collapse into one);
    - ``"all"``: every due slot, at most ``MAX_CATCH_UP`` of them (the most recent);
    - ``"none"``: nothing more.
    """
    if next_slot > now:
        return Plan(next_slot=next_slot)
    chosen: list[datetime] = []
    skipped = False
    for slot in cron.at_or_before(now):
        if slot < next_slot:
            break
        if len(chosen) >= MAX_CATCH_UP:
            skipped = True
            break
        if now - slot <= on_time or catch_up == "all" or (catch_up == "latest" and not chosen):
            chosen.append(slot)
            continue
        skipped = True
        break
    chosen.reverse()
    return Plan(slots=chosen, skipped=skipped, next_slot=cron.after(now))


@dataclass(frozen=True)
class ScheduleSpec:
    """One expression of one workflow class, as the worker uses it."""

    workflow_name: str
    cron: CronSchedule
    catch_up: str

    @property
    def key(self) -> str:
        return self.cron.key

    @property
    def expression(self) -> str:
        return self.cron.expression

    @property
    def timezone(self) -> str:
        return self.cron.timezone


def expressions(declared) -> list:
    """A class's ``schedules`` as a list (a lone string is one expression)."""
    declared = declared or ()
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, (list, tuple, set, frozenset)):
        return list(declared)
    return [declared]  # not a list: reported as an expression that is not a string


def specs(workflow_name: str, expressions: list, timezone: str, catch_up: str) -> list[ScheduleSpec]:
    """A class's schedules, each checked: an expression, time zone or policy it cannot use raises
    ``InvalidSchedule``; croniter missing raises ``MissingExtra``. An expression listed twice is one."""
    if not expressions:
        return []
    if catch_up not in CATCH_UP_POLICIES:
        raise InvalidSchedule(f"schedule_catch_up must be one of {', '.join(map(repr, CATCH_UP_POLICIES))}, "
                              f"got {catch_up!r}")
    _zone(timezone)
    found: dict[str, ScheduleSpec] = {}
    for expression in expressions:
        cron = CronSchedule(expression, timezone)
        found.setdefault(cron.key, ScheduleSpec(workflow_name, cron, catch_up))
    return list(found.values())


def problems(expressions: list, timezone: str, catch_up: str) -> list[tuple[str, str]]:
    """What is wrong with a class's schedule attributes, as ``(attribute, sentence)`` pairs for the
    system check: ``"schedules"``, ``"schedule_timezone"`` or ``"schedule_catch_up"``. Expressions are
    read only when croniter is installed (``require_croniter()`` says when it is not)."""
    found: list[tuple[str, str]] = []
    if not expressions:
        return found
    if catch_up not in CATCH_UP_POLICIES:
        found.append(("schedule_catch_up", f"schedule_catch_up must be one of "
                                           f"{', '.join(map(repr, CATCH_UP_POLICIES))}, got {catch_up!r}"))
    try:
        _zone(timezone)
    except InvalidSchedule as exc:
        found.append(("schedule_timezone", str(exc)))
        return found
    seen: set[str] = set()
    for expression in expressions:
        try:
            cron = CronSchedule(expression, timezone)
        except InvalidSchedule as exc:
            found.append(("schedules", str(exc)))
            continue
        if cron.key in seen:
            found.append(("schedules", f"Cron expression {expression!r} is listed twice"))
        seen.add(cron.key)
    return found
