from django.core.management.base import BaseCommand, CommandError

from django_workflows.shared import routing
from django_workflows.errors import MissingExtra, WorkflowConfigError, require_extra
from django_workflows.surfaces.worker import Worker


class Command(BaseCommand):
    help = (
        "Run replays: a django-q2 cluster, the wake-up loop that fires timers within a second, and the "
        "sweeper that recovers replays of dead workers. Stops gracefully on SIGTERM or SIGINT (twice forces)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workers", type=int, default=None, help="django-q2 worker processes (default: Q_CLUSTER's).")
        parser.add_argument("--max-seconds", type=float, default=None, help="Stop after this many seconds.")
        parser.add_argument("--no-cluster", action="store_true",
                            help="Run only the wake-up loop and the sweeper (replays run elsewhere: in a separate "
                                 "qcluster, or in the executor's own worker: the task backend's with the tasks "
                                 "executor, Celery's with the Celery executor).")
        parser.add_argument("--queues", default=None,
                            help="Serve only these queues, separated by commas (e.g. heavy,default); default: every "
                                 "queue. An instance of another queue is never taken here.")

    def handle(self, *args, workers, max_seconds, no_cluster, queues=None, **options):
        if workers is not None and workers < 1:
            self.stderr.write("--workers must be 1 or more.")
            raise SystemExit(2)
        try:
            served = None if queues is None else routing.parse_queues(queues)
        except WorkflowConfigError as exc:
            raise CommandError(str(exc)) from None
        if not no_cluster:
            from django_workflows.executors import get_executor

            executor = get_executor()
            if executor.worker_command:
                raise CommandError(f"The replays of {type(executor).__name__} run in its own worker "
                                   f"({executor.worker_command}), not in a django-q2 cluster: run "
                                   "workflows_worker --no-cluster beside that worker.")
            try:
                require_extra("django_q", "q2", "workflows_worker's cluster")
            except MissingExtra as exc:
                raise CommandError(f"{exc} Or run only the timers and the sweeper: --no-cluster.") from None
        Worker(workers=workers, max_seconds=max_seconds, run_cluster=not no_cluster, queues=served).run()
