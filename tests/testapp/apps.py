import os

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        if os.environ.get("TEST_AUDIT_REPLAYS"):
            from django_workflows.signals import replay_finished, replay_started
            from tests.testapp import audit

            replay_started.connect(audit.started)
            replay_finished.connect(audit.finished)
