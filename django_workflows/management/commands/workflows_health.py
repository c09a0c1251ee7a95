import json

from django.core.management.base import BaseCommand

from django_workflows.surfaces.worker import health


class Command(BaseCommand):
    help = "Exit 0 if a workflows_worker wrote a heartbeat recently, 1 otherwise (for container health checks)."

    def add_arguments(self, parser):
        parser.add_argument("--max-age", type=float, default=None,
                            help="Seconds a heartbeat stays fresh (default: HEARTBEAT_STALE_SECONDS).")
        parser.add_argument("--json", action="store_true", help="Print the heartbeats as JSON.")

    def handle(self, *args, max_age, json: bool = False, **options):
        report = health(max_age)
        if options.get("json") or json:
            self.stdout.write(_dumps(report))
        elif report["healthy"]:
            self.stdout.write(f"healthy: {report['fresh']} worker(s) seen within {report['max_age']:g} s")
        else:
            self.stderr.write(f"unhealthy: no worker heartbeat within {report['max_age']:g} s "
                              f"({len(report['workers'])} stale); is workflows_worker running?")
        if not report["healthy"]:
            raise SystemExit(1)


def _dumps(report) -> str:
    return json.dumps(report, default=str, indent=2)
