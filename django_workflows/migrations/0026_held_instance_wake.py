# The queued instances a concurrency limit holds back wake at their deadline: an index the wake-up loop
# claims them by, and the trigger that tells an idle worker of a new wake time (0005, 0024) learns of them.
#
# The index is partial (queued instances with a wake time: only those held back with a deadline) and built
# concurrently on PostgreSQL, so no write to the instance table waits for it; the trigger is replaced in a
# transaction of its own, a catalog change.

from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL

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
        ('django_workflows', '0025_limit_keys_priorities_queues'),
    ]

    operations = [
        migrations.AlterField(
            model_name='instance',
            name='wake_at',
            field=models.DateTimeField(blank=True, help_text='When a waiting instance is next due; when a scheduled one starts; when a queued one a concurrency limit holds back reaches its deadline.', null=True),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('status', 'queued'), ('wake_at__isnull', False)), fields=['status', 'wake_at'], name='dw_instance_held'),
        ),
        migrations.RunPython(_wake_trigger(['waiting', 'scheduled', 'queued']), _wake_trigger(['waiting', 'scheduled']),
                             atomic=True, elidable=False),
    ]
