from django.db import migrations, models

from django_workflows.migration_operations import (
    AddIndexConcurrentlyOnPostgreSQL,
    RemoveIndexConcurrentlyOnPostgreSQL,
)


class Migration(migrations.Migration):
    """The retention sweep's index holds the instances that ended, the only ones it reads: an instance's
    INSERT and each change of status before its end no longer write to it. The new index is built before
    the old one is dropped, so the sweep always has one."""

    # CREATE INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0028_step_instance_without_its_own_index'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('ended_at__isnull', False)),
                               fields=['status', 'purge_at', 'ended_at'], name='dw_instance_purge'),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            name='dw_instance_retention',
        ),
    ]
