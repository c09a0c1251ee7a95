"""What ``manage.py workflows`` needs besides parsing: finding instances, reading JSON arguments, naming the
sender of an event, and laying describe data out as text tables; the data itself always comes from
``django_workflows.reading.describe``, and this module only formats it.
"""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import UTC, datetime, timedelta

from django_workflows import workflows
from django_workflows.shared import audit, workflow_access as access
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.counts import Count
from django_workflows.reading.drawing.time_axis import human_milliseconds
from django_workflows.shared.durations import format_duration, milliseconds
from django_workflows.errors import InstanceNotFound, WorkflowNotFound
from django_workflows.models import Instance
from django_workflows.shared.options import parse_cpu_time_limit
from django_workflows.foundations.validation import validate_existing_instance_id

LATEST = "latest"
MAX_CELL = 60
EMPTY = "-"


# -- arguments ------------------------------------------------------------------------------------

def json_argument(text: str):
    """An argparse ``type``: the argument parsed as JSON, or a usage error saying where it is wrong.

    argparse prefixes the message with the argument's name, so the user learns which argument
    and where in it the JSON breaks.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("not valid JSON: it is empty (pass null for no value)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}\n{_pointer(exc)}") from None
    except RecursionError:
        raise argparse.ArgumentTypeError("not valid JSON: nested too deeply") from None


def _pointer(exc: json.JSONDecodeError) -> str:
    """The line of the document around the error, with a caret under the offending character."""
    line = exc.doc.split("\n")[exc.lineno - 1]
    column = exc.colno - 1
    # Long one-line documents (a pasted payload) are cut to a window around the error.
    start = max(0, column - 30)
    excerpt = line[start:column + 30]
    return f"  {excerpt}\n  {' ' * (column - start)}^"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of 1 or more, got {text!r}")
    return value


def duration_argument(text: str) -> int | str:
    """An argparse ``type`` for a duration: digits are milliseconds, anything else is passed on as
    text ("3 days") for the engine to read, which says what is wrong with it."""
    return int(text) if text.isascii() and text.isdigit() else text


def moment_argument(text: str) -> datetime:
    """An argparse ``type`` for a moment: ISO 8601 with a UTC offset ("2030-01-31T09:00+01:00", "...Z")."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an ISO 8601 time such as 2030-01-31T09:00+01:00, got {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset, so it names no moment; add one (+01:00, or Z)")
    return moment


def cli_sender() -> str:
    """``cli:<OS user>`` for ``Event.sender``, so the audit trail shows who sent an event by hand."""
    try:
        who = getpass.getuser()
    except (OSError, KeyError):
        # No LOGNAME/USER and no passwd entry (some containers): still record the channel.
        who = "unknown"
    return audit.sender("cli", who)


# -- lookups --------------------------------------------------------------------------------------

def find_user(username: str):
    """The Django user ``--user`` names, who must be active; what they may send is the handle's to say."""
    from django.contrib.auth import get_user_model
    from django.core.management.base import CommandError

    model = get_user_model()
    try:
        user = model._default_manager.get_by_natural_key(username)
    except model.DoesNotExist:
        raise CommandError(f"No user named {username!r}; --user takes a Django username.") from None
    if not user.is_active:
        raise CommandError(f"User {username!r} is inactive and may not send events.")
    return user


def visible_instances(workflow_name: str, user, action: str = access.VIEW):
    """The workflow's instances ``--user`` may ``action`` (all of them without ``--user``: the account
    that runs the command is trusted, as the project's own code is). A workflow the user may not know
    of is missing to them, reported without the list of those that exist."""
    workflows.get(workflow_name)  # an unknown workflow is reported as such, not as "no instances"
    return _narrowed(workflow_name, user, action)


def _narrowed(workflow_name: str, user, action: str):
    if user is not None:
        if not access.holds_model_permission(user, action):
            raise access_refused(user, action)
        if not access.knows_workflow(user, workflow_name):
            raise WorkflowNotFound(f"No workflow named {workflow_name!r}.", workflow=workflow_name)
    return access.scope(Instance.objects.for_workflow(workflow_name), user, action)


def access_refused(user, action: str):
    from django.core.management.base import CommandError

    needed = " or ".join(access.MODEL_PERMISSIONS[action])
    return CommandError(f"User {user.get_username()!r} lacks the permission {needed}, which this needs.")


def find_instance(workflow_name: str, instance_id: str, user=None) -> Instance:
    """The instance row, by id or ``latest`` (the most recently created instance of the workflow)."""
    if instance_id == LATEST:
        row = visible_instances(workflow_name, user).order_by("-created_at", "-id").first()
        if row is None:
            raise InstanceNotFound(
                f"Workflow {workflow_name!r} has no instances yet, so there is no latest one.",
                workflow=workflow_name, instance_id=instance_id,
            )
        return row
    return instance_row(find_handle(workflow_name, instance_id, user))


def find_handle(workflow_name: str, instance_id: str, user=None, action: str = access.VIEW):
    """The instance's handle; an id that could never exist is reported as invalid, not as missing, and
    one ``--user`` may not ``action`` as missing."""
    handle = workflows.get(workflow_name)
    validate_existing_instance_id(instance_id)
    if user is not None and not _narrowed(workflow_name, user, action).filter(instance_id=instance_id).exists():
        raise InstanceNotFound(f"Workflow {workflow_name!r} has no instance with id {instance_id!r}.",
                               workflow=workflow_name, instance_id=instance_id)
    return handle.get(instance_id)


def instance_row(handle) -> Instance:
    return Instance.objects.get(pk=handle.pk)


# -- text output ----------------------------------------------------------------------------------

def dumps(data) -> str:
    """``--json``: describe data as JSON, each datetime in ISO 8601 as the API writes it."""
    return json.dumps(data, indent=2, default=_json_value)


def _json_value(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return milliseconds(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def when(moment: datetime | None) -> str:
    """A datetime from describe data as a compact UTC time, to the second."""
    if moment is None:
        return EMPTY
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def error_text(error: dict | None) -> str:
    if not error:
        return EMPTY
    return f"{error.get('name')}: {error.get('message')}"


def retention_text(retention: dict) -> str:
    """An instance's own retention from describe, as people read it: "success 3 days, error 30 days"."""
    return ", ".join(
        f"{outcome} {'RETENTION_DAYS' if retention[outcome] is None else format_duration(retention[outcome])}"
        for outcome in ("success", "error"))


def clip(text: str, width: int = MAX_CELL) -> str:
    text = " ".join(str(text).split())  # a table cell is one line
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(header)] + [len(row[i]) for row in cells]) for i, header in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def fields(pairs: list[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in pairs)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in pairs)


def format_workflow_list(totals: dict[str, dict[str, Count]]) -> str:
    """The workflows with their instances per status: "about 1,234" where a count is an estimate."""
    if not totals:
        return ("No workflows. A workflow is a WorkflowEntrypoint subclass defined in an installed app's "
                "workflows.py.")
    statuses = list(next(iter(totals.values())))
    rows = [[name, sum(by_status.values(), Count(0)), *(by_status.get(s, Count(0)) for s in statuses)]
            for name, by_status in totals.items()]
    return table(["WORKFLOW", "TOTAL", *statuses], rows)


def _limit_fields(limits: dict | None) -> list[tuple[str, str]]:
    if not limits:
        return []
    shown = []
    if limits["concurrency"] is not None:
        shown.append(("Concurrency limit", f"{limits['concurrency']} ({limits['running']} running, "
                                           f"{limits['queued']} queued)"))
    if limits["rate_limit"] is not None:
        shown.append(("Rate limit", f"{limits['rate_limit']} ({limits['recent_starts']} in the window)"))
    return shown


def _schedule_fields(schedules: list[dict]) -> list[tuple[str, str]]:
    shown = []
    for entry in schedules:
        where = f"{entry['cron']} ({entry['timezone']})"
        if entry["error"]:
            shown.append(("Schedule", f"{where}: not run, {entry['error']}"))
        else:
            upcoming = ", ".join(_local_slot(slot, entry["timezone"]) for slot in entry["next"][:1])
            shown.append(("Schedule", f"{where}, next {upcoming}"))
    return shown


def format_workflow(description: dict) -> str:
    limit = description["step_limit"]
    if description["step_limit_from_setting"]:
        limit = f"{limit} (the STEP_LIMIT setting)"
    cpu_limit = description["cpu_time_limit_ms"]
    if cpu_limit is None:
        setting = parse_cpu_time_limit(workflow_settings.CPU_TIME_LIMIT, "DJANGO_WORKFLOWS['CPU_TIME_LIMIT']")
        cpu_limit = (f"{human_milliseconds(setting.total_seconds() * 1000)} per replay "
                     "(the CPU_TIME_LIMIT setting)")
    else:
        cpu_limit = f"{human_milliseconds(cpu_limit)} per replay"
    head = fields([
        ("Workflow", description["name"]),
        ("Class", description["class_name"]),
        ("Description", description["description"] or EMPTY),
        ("Step limit", limit),
        ("CPU time limit", cpu_limit),
        *_limit_fields(description.get("limits")),
        *_schedule_fields(description.get("schedules") or []),
        ("Instances", sum(description["instances"].values())),
    ])
    return head + "\n\n" + table(["STATUS", "INSTANCES"], list(map(list, description["instances"].items())))


def _local_slot(moment: datetime, timezone: str) -> str:
    from zoneinfo import ZoneInfo

    return moment.astimezone(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M:%S %Z")


def format_schedules(described: list[dict], now: datetime) -> str:
    """``workflows schedules``: one row per expression, its next slots in its own time zone."""
    if not described:
        return ("No workflow declares schedules. Give a workflow class schedules = ['0 9 * * mon-fri'] "
                "(and schedule_timezone, schedule_catch_up).")
    rows = []
    problems = []
    for entry in described:
        if entry["error"]:
            problems.append(f"{entry['workflow']} {entry['cron']!r}: {entry['error']}")
            next_slots = "(not run: see below)"
        else:
            next_slots = ", ".join(_local_slot(slot, entry["timezone"]) for slot in entry["next"])
        stored = entry["stored_next_slot"]
        if stored is None:
            state = "no worker has run it yet" if not entry["error"] else EMPTY
        elif stored <= now:
            state = f"due since {when(stored)}"
        else:
            state = f"last {when(entry['last_slot'])}"
        rows.append([entry["workflow"], entry["cron"], entry["timezone"], entry["catch_up"], next_slots,
                     state])
    text = table(["WORKFLOW", "CRON", "TIMEZONE", "CATCH-UP", "NEXT SLOTS", "WORKERS"], rows)
    if problems:
        text += "\n\n" + "\n".join(problems)
    return text


def format_instance_list(workflow_name: str, summaries: list[dict], more: bool) -> str:
    if not summaries:
        return f"No instances of {workflow_name!r} match."
    rows = [[s["id"], s["status"], s["version"] or EMPTY, when(s["queued"]), when(s["start"]), when(s["end"]),
             when(s["wake_at"]), s["current_step"] or EMPTY] for s in summaries]
    text = table(["ID", "STATUS", "VERSION", "QUEUED", "START", "END", "WAKES", "CURRENT STEP"], rows)
    if more:
        text += f"\n(newest {len(summaries)} shown; raise --limit for more)"
    return text


def _attempt_count(step: dict) -> str:
    # Only step.do has attempts; a sleep or a wait for an event is one span of time, a patch's marker
    # a moment.
    return str(len(step["attempts"])) if "attempts" in step else EMPTY


def _measured(step: dict, key: str) -> str:
    # A step.do's CPU or wall time over its attempts; a sleep or a wait runs no code.
    value = step.get(key)
    return EMPTY if value is None else human_milliseconds(value)


def format_instance(description: dict) -> str:
    d = description
    pairs = [
        ("Workflow", d["workflow"]),
        ("Instance", d["id"]),
        ("Status", d["status"]),
        ("Version", d["version"] or f"{EMPTY} (none recorded)"),
        ("Subject", d["subject"] or EMPTY),
        ("Tags", ", ".join(f"{key}={value}" for key, value in d["tags"].items()) or EMPTY),
        ("Queued", when(d["queued"])),
        ("Start", when(d["start"])),
        ("End", when(d["end"])),
    ]
    if d["wake_at"]:
        pairs.append(("Wakes", when(d["wake_at"])))
    if d.get("deadline"):
        pairs.append(("Deadline", f"{when(d['deadline'])} (timeout {format_duration(d['timeout'])})"))
    family = [(label, d.get(link)) for label, link in (("Continues", "predecessor"), ("Continued as", "successor"))]
    pairs += [(label, member) for label, member in family if member]
    if d["current_step"]:
        pairs.append(("Current step", d["current_step"]))
    if d["waiting_reason"]:
        pairs.append(("Waiting because", d["waiting_reason"]))
    pairs += [
        ("CPU time", f"{human_milliseconds(d['cpu_ms'])} (run() and its step bodies, over every replay)"),
        ("Step time", f"{human_milliseconds(d['step_wall_ms'])} (its step attempts, end to end)"),
        ("Params", compact_json(d["params"])),
        ("Output", compact_json(d["output"])),
        ("Error", error_text(d["error"])),
    ]
    if d.get("rollback"):
        rollback = d["rollback"]
        failure = rollback["error"]
        pairs.append(("Rollback", rollback["outcome"] + (f": {failure['name']}: {failure['message']}" if failure else "")))
    if d.get("retention"):
        pairs.append(("Retention", retention_text(d["retention"])))
        if d["retention"]["purge_at"]:
            pairs.append(("Deleted after", when(d["retention"]["purge_at"])))
    if d.get("parent"):
        parent = d["parent"]
        name = f"{parent['workflow']}/{parent['id']}" if parent["workflow"] else "(deleted)"
        pairs.append(("Parent", f"{name}, step {parent['step']} (on its end: {parent['on_parent_end']})"))
    parts = [fields(pairs)]
    if d.get("children"):
        rows = [[f"{c['workflow']}/{c['id']}", c["status"], c["step"], c["on_parent_end"]] for c in d["children"]]
        parts.append(table(["CHILD", "STATUS", "STARTED BY STEP", "ON PARENT END"], rows))
    if d["steps"]:
        rows = [[s["key"], s["type"], s["status"], _attempt_count(s), _measured(s, "cpu_ms"),
                 _measured(s, "wall_ms"), when(s["start"]), when(s["end"]), clip(error_text(s["error"]))]
                for s in d["steps"]]
        headers = ["STEP", "TYPE", "STATUS", "ATTEMPTS", "CPU", "TOOK", "START", "END", "LAST ERROR"]
        parts.append(table(headers, rows))
    else:
        parts.append("No steps journaled yet.")
    if d["events"]:
        rows = [[e["type"], when(e["received"]), e["sender"] or EMPTY, e["consumed_by"] or "(in the inbox)"]
                for e in d["events"]]
        parts.append(table(["EVENT", "RECEIVED", "SENDER", "CONSUMED BY"], rows))
    pages = d.get("pages", {})
    more = [f"the first {len(d[name])} of {pages[name]['count']} {name}" for name in ("steps", "events")
            if name in pages and pages[name]["count"] > len(d[name])]
    if more:
        parts.append(f"Shown: {' and '.join(more)}; the API (?steps_page=, ?events_page=) and the admin "
                     "show the rest.")
    return "\n\n".join(parts)
