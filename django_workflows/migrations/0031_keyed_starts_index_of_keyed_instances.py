from django.db import migrations, models

from django_workflows.migration_operations import (
    AddIndexConcurrentlyOnPostgreSQL,
    RemoveIndexConcurrentlyOnPostgreSQL,
)


class Migration(migrations.Migration):
    """The index of a keyed rate limit's starts holds the instances that have a limit key, the only ones
    it counts: the INSERT of an instance without one (most workflows have no keyed limit) and each of its
    starts no longer write to it. The new index is built before the old one is dropped, so the claim's
    check always has one."""

    # CREATE INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0030_instance_id_leads_its_unique_index'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('limit_key', ''), _negated=True),
                               fields=['workflow_name', 'limit_key', 'started_at'], name='dw_instance_keyed_starts'),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            name='dw_instance_key_starts',
        ),
    ]
