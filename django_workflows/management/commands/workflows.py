"""``manage.py workflows``: inspect and steer workflows from a shell, like ``wrangler workflows``.

Exit codes: 0 done; 1 the engine refused (unknown workflow or instance, an invalid id or event type,
a transition the status does not allow, an existing id); 2 the command line itself is wrong (a missing
or unknown argument, JSON that does not parse). Every subcommand takes ``--json``.
"""

import argparse

from django.core.management.base import BaseCommand, CommandError

from django_workflows import workflows
from django_workflows.shared import audit, clock, declared_events, workflow_access as access
from django_workflows.surfaces import bulk_steering, cli
from django_workflows.client import sending
from django_workflows.foundations import subjects
from django_workflows.reading.describe import (
    as_numbers,
    describe_instance,
    describe_schedules,
    describe_workflow,
    instance_summary,
    workflow_status_totals,
)
from django_workflows.errors import InstanceNotFound, InvalidTags, WorkflowError
from django_workflows.models import Instance, InstanceStatus
from django_workflows.foundations.tag_rules import parse_tag_filter
from django_workflows.shared.transitions import TRANSITIONS

AS_USER = ("Act as this Django user: only the instances they may see and steer (their permissions, and the "
           "project's INSTANCE_ACCESS rule). Without it, the account that runs the command sees everything.")


def tag_argument(text: str) -> tuple[str, str]:
    """An argparse ``type``: ``KEY=VALUE`` as a tag, or a usage error that says the rule."""
    try:
        return parse_tag_filter(text, "")
    except InvalidTags as exc:
        raise argparse.ArgumentTypeError(str(exc).lstrip(" :")) from None


class Command(BaseCommand):
    help = "Inspect and steer workflows and their instances (list, describe, trigger, instances ...)."

    def add_arguments(self, parser):
        output = argparse.ArgumentParser(add_help=False)
        output.add_argument("--json", action="store_true", help="Print the result as JSON.")
        commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", required=True)

        commands.add_parser("list", parents=[output], help="Workflows with their instance counts per status.")

        describe = commands.add_parser("describe", parents=[output],
                                       help="A workflow: its class, step limit and instance counts.")
        describe.add_argument("name", metavar="NAME")

        listed = commands.add_parser(
            "schedules", parents=[output],
            help="Cron schedules: each expression, its time zone, catch-up policy and next slots, and the last "
                 "slot the workers created.")
        listed.add_argument("name", metavar="NAME", nargs="?", default=None,
                            help="Only this workflow's schedules (default: every workflow's).")
        listed.add_argument("--count", type=cli.positive_int, default=3,
                            help="How many next slots to show (default 3).")

        trigger = commands.add_parser("trigger", parents=[output],
                                      help="Create an instance and print its id.")
        trigger.add_argument("name", metavar="NAME")
        trigger.add_argument("params", metavar="PARAMS_JSON", nargs="?", type=cli.json_argument, default=None,
                             help="The instance's params, as JSON (default: null).")
        trigger.add_argument("--id", dest="instance_id", metavar="ID", default=None,
                             help="The instance id (default: a new UUID); an existing id is an error.")
        trigger.add_argument("--tag", dest="tags", metavar="KEY=VALUE", action="append", type=tag_argument,
                             default=[], help="A tag of the instance (tenant=acme); repeat for more.")
        trigger.add_argument("--subject", metavar="APP.MODEL:PK", default=None,
                             help="The row the instance is about (shop.order:42), which must exist.")
        trigger.add_argument("--timeout", metavar="DURATION", type=cli.duration_argument, default=None,
                             help="Its deadline instead of the workflow's timeout: milliseconds or 'N unit(s)' "
                                  "('7 days'); past it, it ends errored with WorkflowTimeoutError.")
        trigger.add_argument("--start-at", metavar="TIME", type=cli.moment_argument, default=None,
                             help="Start it at this time (ISO 8601 with a UTC offset); scheduled until then.")
        trigger.add_argument("--start-in", metavar="DURATION", type=cli.duration_argument, default=None,
                             help="Start it after this delay: milliseconds or 'N unit(s)' ('10 minutes').")
        trigger.add_argument("--debounce", metavar="KEY", default=None,
                             help="Collapse the triggers of this key into one instance, which starts once "
                                  "--debounce-period passes without another; a trigger that joins prints its id.")
        for option, what in (("period", "after the last trigger"), ("max-wait", "after the first at the latest")):
            trigger.add_argument(f"--debounce-{option}", metavar="DURATION", type=cli.duration_argument,
                                 default=None, help=f"With --debounce: how long {what} the instance starts.")
        for outcome, ended in (("success", "complete"), ("error", "errored or terminated")):
            trigger.add_argument(f"--retention-{outcome}", metavar="DURATION", type=cli.duration_argument,
                                 default=None,
                                 help=f"How long the instance is kept once {ended}: milliseconds or "
                                      "'N unit(s)' ('3 days'), at most 365 days (default: the RETENTION_DAYS "
                                      "setting).")

        verify = commands.add_parser(
            "verify", parents=[output],
            help="Replay every unfinished instance's journal against the code deployed now (no step runs, "
                 "nothing is written); list those it would break, and exit 1 if there are any.")
        verify.add_argument("name", metavar="NAME", nargs="?", default=None,
                            help="Only this workflow's instances (default: every workflow's).")

        instances = commands.add_parser("instances", help="List, describe and steer instances.")
        actions = instances.add_subparsers(dest="action", metavar="ACTION", required=True)

        listing = actions.add_parser("list", parents=[output], help="A workflow's instances, newest first.")
        listing.add_argument("name", metavar="NAME")
        listing.add_argument("--status", choices=InstanceStatus.values, default=None)
        listing.add_argument("--subject", metavar="APP.MODEL:PK", default=None,
                             help="Only the instances about this row (shop.order:42).")
        listing.add_argument("--tag", dest="tags", metavar="KEY=VALUE", action="append", type=tag_argument,
                             default=[], help="Only the instances holding this tag (tenant=acme); repeat for "
                                              "more, all of which must match.")
        listing.add_argument("--limit", type=cli.positive_int, default=50,
                             help="At most this many (default 50).")
        listing.add_argument("--user", metavar="USERNAME", default=None, help=AS_USER)

        detail = actions.add_parser("describe", parents=[output],
                                    help="An instance: status, params, output, error, steps and events.")
        detail.add_argument("name", metavar="NAME")
        detail.add_argument("instance_id", metavar="ID",
                            help=f"An instance id, or {cli.LATEST!r} for the newest instance.")
        detail.add_argument("--user", metavar="USERNAME", default=None, help=AS_USER)

        event = actions.add_parser("send-event", parents=[output], help="Send an event to an instance.")
        event.add_argument("name", metavar="NAME")
        event.add_argument("instance_id", metavar="ID")
        event.add_argument("--type", dest="event_type", metavar="TYPE", required=True, help="The event type.")
        event.add_argument("--payload", metavar="JSON", type=cli.json_argument, default=None,
                           help="The event's payload, as JSON (default: null).")
        event.add_argument("--user", metavar="USERNAME", default=None,
                           help="Send as this Django user, who needs the send_event permission and the "
                                "event type's declared permission (required for a type that declares one).")

        for action, transition_spec in TRANSITIONS.items():
            transition = actions.add_parser(action, parents=[output], help=transition_spec.summary)
            transition.add_argument("name", metavar="NAME", nargs="?", default=None,
                                    help="The workflow (with --where, optional: then every workflow's).")
            transition.add_argument("instance_id", metavar="ID", nargs="?", default=None,
                                    help="The instance; or leave it out and select instances with --where.")
            transition.add_argument("--user", metavar="USERNAME", default=None, help=AS_USER)
            transition.add_argument(
                "--where", metavar="FILTER=VALUE", action="append", default=[],
                help=f"{action.capitalize()} every instance this selects that the change applies to (repeat it to "
                     f"combine; VALUE may list alternatives, id=a,b). Filters: "
                     f"{', '.join(sorted(bulk_steering.FILTERS))}.")
            transition.add_argument("--dry-run", action="store_true",
                                    help="With --where: only list the instances that would be changed.")
            transition.add_argument("--limit", type=cli.positive_int, default=bulk_steering.DEFAULT_BATCH,
                                    help=f"With --where: at most this many (default {bulk_steering.DEFAULT_BATCH}).")
            if action == "terminate":
                transition.add_argument("--rollback", action="store_true",
                                        help="First run the undos of the steps that succeeded with one.")
            if action == "restart":
                transition.add_argument("--from-step", metavar="STEP", default=None,
                                        help="Run again from this journaled step, keeping the steps before it.")
                transition.add_argument("--count", type=cli.positive_int, default=1,
                                        help="With --from-step: which step of that name (default 1, the first).")

    def handle(self, *args, **options):
        self.as_json = options["json"]
        if options["subcommand"] == "instances":
            run = {"list": self.instances_list, "describe": self.instances_describe,
                   "send-event": self.instances_send_event}.get(options["action"], self.instances_transition)
        else:
            run = {"list": self.workflows_list, "describe": self.workflows_describe,
                   "trigger": self.trigger, "verify": self.verify,
                   "schedules": self.schedules}[options["subcommand"]]
        try:
            run(options)
        except WorkflowError as exc:
            # The engine's messages say what is wrong and what to do; a traceback would bury them.
            raise CommandError(str(exc)) from exc

    @staticmethod
    def user(options):
        return cli.find_user(options["user"]) if options.get("user") else None

    def show(self, data, text: str) -> None:
        self.stdout.write(cli.dumps(data) if self.as_json else text)

    def workflows_list(self, options):
        # The table says "about" where a count is PostgreSQL's estimate; the JSON gives the numbers.
        totals = workflow_status_totals()
        self.show(as_numbers(totals), cli.format_workflow_list(totals))

    def workflows_describe(self, options):
        description = describe_workflow(workflows.get(options["name"]).name)
        self.show(description, cli.format_workflow(description))

    def trigger(self, options):
        retention = {outcome: options[f"retention_{outcome}"] for outcome in ("success", "error")
                     if options[f"retention_{outcome}"] is not None}
        subject = None if options["subject"] is None else subjects.load(options["subject"])
        debounce = None
        if options["debounce"] is not None:
            debounce = {"key": options["debounce"], "period": options["debounce_period"],
                        "max_wait": options["debounce_max_wait"]}
            if debounce["period"] is None:
                raise CommandError("--debounce needs --debounce-period: how long after the last trigger it starts.")
        elif options["debounce_period"] is not None or options["debounce_max_wait"] is not None:
            raise CommandError("--debounce-period and --debounce-max-wait go with --debounce KEY.")
        handle = workflows.get(options["name"]).create(id=options["instance_id"], params=options["params"],
                                                       retention=retention or None, subject=subject,
                                                       tags=dict(options["tags"]), timeout=options["timeout"],
                                                       start_at=options["start_at"], start_in=options["start_in"],
                                                       debounce=debounce)
        self.show(describe_instance(cli.instance_row(handle)), handle.id)

    def schedules(self, options):
        now = clock.now()
        name = workflows.get(options["name"]).name if options["name"] else None
        described = describe_schedules(now, options["count"], name)
        self.show(described, cli.format_schedules(described, now))

    def verify(self, options):
        from django_workflows.engine.verification import verify_unfinished

        name = options["name"]
        checked, found = verify_unfinished(name)
        if self.as_json:
            self.stdout.write(cli.dumps({"verified": checked, "diverged": [d.as_dict() for d in found]}))
        else:
            scope = f"workflow {name!r}" if name else "every workflow"
            self.stdout.write(f"Verified {checked} unfinished instances of {scope} against the code deployed now: "
                              f"{len(found)} would stop.")
            if found:
                self.stdout.write(cli.table(
                    ["WORKFLOW", "INSTANCE", "STATUS", "ERROR", "STEP", "EXPECTED"],
                    [[d.workflow, d.instance_id, d.status, d.error, d.step or "", d.expected_step or ""]
                     for d in found]))
                for divergence in found:
                    self.stderr.write(f"{divergence.workflow}/{divergence.instance_id}: {divergence.message}")
        if found:
            raise CommandError(f"{len(found)} unfinished instances do not agree with the code deployed now",
                               returncode=1)

    def instances_list(self, options):
        name = workflows.get(options["name"]).name
        rows = cli.visible_instances(name, self.user(options)).order_by("-created_at", "-id")
        if options["status"]:
            rows = rows.filter(status=options["status"])
        if options["subject"] is not None:
            rows = rows.for_subject(options["subject"])
        if options["tags"]:
            rows = rows.tagged(dict(options["tags"]))
        limit = options["limit"]
        # One row past the limit tells whether there are more, without counting them all.
        found = list(rows[: limit + 1])
        summaries = [instance_summary(row) for row in found[:limit]]
        self.show(summaries, cli.format_instance_list(name, summaries, more=len(found) > limit))

    def instances_describe(self, options):
        description = describe_instance(cli.find_instance(options["name"], options["instance_id"], self.user(options)))
        self.show(description, cli.format_instance(description))

    def instances_send_event(self, options):
        event_type = options["event_type"]
        user = self.user(options)
        try:
            handle = cli.find_handle(options["name"], options["instance_id"], user, access.SEND)
        except InstanceNotFound:
            if user is not None:
                # Refused for a missing instance as for one that exists, to say nothing of which it is.
                sending.authorize(options["name"], event_type, declared_events.CLI, user)
            raise
        # Sent as "cli:<username>" with --user; without, as the account that runs the command.
        sent = handle.send_event(type=event_type, payload=options["payload"], channel=declared_events.CLI,
                                 user=user, sender=None if user else cli.cli_sender())
        row = cli.instance_row(handle)
        if user is None or (access.holds_model_permission(user, access.VIEW) and access.allows(user, access.VIEW, row)):
            summary = instance_summary(row)
            text = f"Sent event {event_type!r} to {handle.workflow_name}/{handle.id}; it is {summary['status']}."
        else:
            summary, text = None, f"Sent event {event_type!r} to {handle.workflow_name}/{handle.id}."
        self.show({"accepted": True, "type": event_type, "sender": sent.sender, "instance": summary}, text)

    def instances_transition(self, options):
        action = options["action"]
        user = self.user(options)
        if options["where"]:
            return self.instances_bulk(action, user, options)
        if options["name"] is None or options["instance_id"] is None:
            # A usage error, as argparse reports one (exit code 2), with the other way to say it.
            missing = "NAME, ID" if options["name"] is None else "ID"
            raise CommandError(f"the following arguments are required: {missing} (the instance to {action}), or "
                               "select instances with --where FILTER=VALUE.", returncode=2)
        handle = cli.find_handle(options["name"], options["instance_id"], user)
        if user is not None and not (access.holds_model_permission(user, access.STEER)
                                     and access.allows(user, access.STEER, cli.instance_row(handle))):
            raise CommandError(f"User {user.get_username()!r} may see {handle.workflow_name}/{handle.id} but "
                               "not steer it.")
        if options.get("from_step") is not None:
            handle.restart(from_step=options["from_step"], count=options["count"])
        elif options.get("rollback"):
            handle.terminate(rollback=True)
        else:
            getattr(handle, action)()
        summary = instance_summary(cli.instance_row(handle))
        done = TRANSITIONS[action].past.capitalize()
        self.show(summary, f"{done} {handle.workflow_name}/{handle.id}; it is {summary['status']}.")

    def instances_bulk(self, action: str, user, options):
        if options["instance_id"] is not None:
            raise CommandError("--where selects the instances: leave out ID.")
        change = bulk_steering.Change(action, from_step=options.get("from_step"),
                                      count=options.get("count", 1), rollback=bool(options.get("rollback")))
        where = bulk_steering.parse_where_arguments(options["where"])
        if options["name"] is not None:
            where.setdefault("workflow", []).append(workflows.get(options["name"]).name)
        if user is not None and not access.holds_model_permission(user, access.STEER):
            raise cli.access_refused(user, access.STEER)
        selected = Instance.objects.filter(bulk_steering.where_filter(where))
        instances = bulk_steering.select(change, selected, user)
        outcome = bulk_steering.steer(change, instances, dry_run=options["dry_run"], limit=options["limit"],
                                      who=cli.cli_sender() if user is None else audit.user_sender("cli", user))
        verb = f"Would {action}" if outcome.dry_run else TRANSITIONS[action].past.capitalize()
        variant = (f" from step {change.from_step!r} #{change.count}" if change.from_step is not None
                   else ", rolling back first" if change.rollback else "")
        lines = [f"{verb} {len(outcome.changed)} instance{'s' if len(outcome.changed) != 1 else ''}{variant}"
                 + (": " + ", ".join(map(str, outcome.changed)) if outcome.changed else ".")]
        lines += [f"Refused {row}: {message}" for row, message in outcome.refused]
        if outcome.more:
            lines.append(f"More instances match: run it again (or raise --limit above {options['limit']}).")
        self.show(outcome.as_dict() | {"ids": [str(row) for row in outcome.changed]}, "\n".join(lines))

