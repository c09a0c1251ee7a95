import os

from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "benchmarks"
    label = "benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # workflows.py is imported by django_workflows' autodiscovery.
        if os.environ.get("BENCH_QUERY_LOG"):
            from benchmarks import querylog

            querylog.install(os.environ["BENCH_QUERY_LOG"])
