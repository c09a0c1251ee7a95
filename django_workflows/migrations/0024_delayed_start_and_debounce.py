# Instances that start later (issue 36): the status scheduled, the debounce key, the index the wake-up
# loop claims scheduled instances by, and one scheduled instance per workflow and debounce key.
#
# The status check is replaced without reading the table under a lock that stops traffic (NOT VALID, then
# VALIDATE); the debounce key is a nullable column (a catalog change); the index and the partial unique
# index are built concurrently on PostgreSQL, where the trigger that tells an idle worker of a new wake
# time (0005) learns the new status too.

from django.db import migrations, models

from django_workflows.migration_operations import (
    AddConstraintConcurrentlyOnPostgreSQL,
    AddIndexConcurrentlyOnPostgreSQL,
    ReplaceCheckConstraint,
)
from django_workflows.migration_reruns import AddFieldOnce

STATUSES = ['scheduled', 'queued', 'running', 'paused', 'waitingForPause', 'waiting', 'errored', 'terminated',
            'complete']

WAKE_TRIGGER = """
DROP TRIGGER IF EXISTS django_workflows_wake ON django_workflows_instance;
CREATE TRIGGER django_workflows_wake AFTER INSERT OR UPDATE OF status, wake_at ON django_workflows_instance
FOR EACH ROW WHEN (NEW.status IN ({statuses}) AND NEW.wake_at IS NOT NULL)
EXECUTE FUNCTION django_workflows_wake_notify();
"""


def _wake_trigger(statuses):
    def install(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor != "postgresql":
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_proc WHERE proname = 'django_workflows_wake_notify'")
            if cursor.fetchone() is None:
                return  # 0005 installed nothing here
        schema_editor.execute(WAKE_TRIGGER.format(statuses=", ".join(f"'{status}'" for status in statuses)))
    return install


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0023_progress'),
    ]

    operations = [
        migrations.AlterField(
            model_name='instance',
            name='status',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('queued', 'Queued'), ('running', 'Running'), ('paused', 'Paused'), ('waitingForPause', 'Waiting for pause'), ('waiting', 'Waiting'), ('errored', 'Errored'), ('terminated', 'Terminated'), ('complete', 'Complete')], default='queued', max_length=16),
        ),
        ReplaceCheckConstraint(
            model_name='instance',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', STATUSES)), name='dw_instance_status_valid'),
        ),
        migrations.AlterField(
            model_name='instance',
            name='wake_at',
            field=models.DateTimeField(blank=True, help_text='When a waiting instance is next due; when a scheduled one starts.', null=True),
        ),
        AddFieldOnce(
            model_name='instance',
            name='debounce_key',
            field=models.CharField(blank=True, default=None, help_text="create(debounce=...)'s key: while it is scheduled, triggers with this key join this instance.", max_length=255, null=True),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('status', 'scheduled')), fields=['status', 'wake_at'], name='dw_instance_scheduled'),
        ),
        AddConstraintConcurrentlyOnPostgreSQL(
            model_name='instance',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'scheduled')), fields=('workflow_name', 'debounce_key'), name='dw_instance_debounce'),
        ),
        migrations.RunPython(_wake_trigger(['waiting', 'scheduled']), _wake_trigger(['waiting']),
                             atomic=True, elidable=False),
    ]
