from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DjangoWorkflowsConfig(AppConfig):
    name = "django_workflows"
    label = "django_workflows"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django_workflows import checks  # noqa: F401  (registers the system checks)

        # Each installed app's workflows.py defines its workflows; importing it registers them.
        autodiscover_modules("workflows")
