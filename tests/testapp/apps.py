import logging
import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django_workflows.signals import replay_finished, replay_started

        if os.environ.get("TEST_CHAOS_LOG_DIR"):
            # The chaos test restarts the database: its audit goes to files, which stay writable.
            from django.db.backends.signals import connection_created
            from django_q.signals import post_spawn

            from tests.testapp import chaos

            connection_created.connect(chaos.name_connection)

            replay_started.connect(chaos.replay_started)
            replay_finished.connect(chaos.replay_finished)
            post_spawn.connect(chaos.worker_spawned)
            logging.getLogger("django_workflows.engine.replay").addHandler(chaos.LapsedLeases())
        elif os.environ.get("TEST_AUDIT_REPLAYS"):
            from tests.testapp import audit

            replay_started.connect(audit.started)
            replay_finished.connect(audit.finished)
