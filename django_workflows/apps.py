from django.apps import AppConfig
from django.db import router
from django.db.models.signals import post_migrate


class DjangoWorkflowsConfig(AppConfig):
    name = "django_workflows"
    label = "django_workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, app_name, app_module):
        super().__init__(app_name, app_module)
        # Here rather than in ready(): django-q2 reads Q_CLUSTER when its own app config is imported,
        # which follows this one when django_workflows is listed first in INSTALLED_APPS.
        from django_workflows.executors import q2_conf

        q2_conf.install_default()

    def ready(self):
        from django_workflows.surfaces import checks  # noqa: F401  (registers the system checks)
        from django_workflows.executors import q2_conf
        from django_workflows.models import Instance

        q2_conf.install_broker_alias(router.db_for_write(Instance))

        # Each installed app's workflows.py defines its workflows; importing it registers them.
        from django_workflows.shared.definition import discover

        discover()
        post_migrate.connect(install_fallback_schedule, sender=self)
        # Each workflow's own permissions, as Django creates a model's: no migration per workflow.
        from django_workflows.shared.workflow_access import create_workflow_permissions

        post_migrate.connect(create_workflow_permissions, sender=self, dispatch_uid="django_workflows.permissions")

        # Writes from other threads while an atomic step's body runs are outside its transaction: every
        # connection is watched for them, from its first statement on.
        from django.db.backends.signals import connection_created

        from django_workflows.engine.atomic_steps import watch_connection

        connection_created.connect(watch_connection, dispatch_uid="django_workflows.engine.atomic_steps")

        # The executor prepares every process before anything is enqueued: a Celery worker learns the
        # replay task here, as Django is set up in it. One that cannot be imported is check E002's.
        from django_workflows.foundations.conf import workflow_settings

        try:
            workflow_settings.import_string("EXECUTOR").install()
        except (ImportError, AttributeError):
            pass

        # Spans and metrics, when opentelemetry-api is installed (the OPENTELEMETRY setting).
        from django_workflows.shared import telemetry

        telemetry.install()


def install_fallback_schedule(using=None, **kwargs):
    """Under a plain ``qcluster`` (no workflows_worker), django-q2's scheduler fires timers and sweeps
    once a minute: slower, but nothing is left behind."""
    from django.apps import apps

    from django_workflows.foundations.conf import workflow_settings

    if not workflow_settings.EXECUTOR.endswith("executors.q2.DjangoQExecutor") or not apps.is_installed("django_q"):
        return
    from django_q.models import Schedule

    Schedule.objects.using(using).update_or_create(
        name="django_workflows.tick",
        defaults={"func": "django_workflows.tick", "schedule_type": Schedule.MINUTES, "minutes": 1,
                  "repeats": -1},
    )
