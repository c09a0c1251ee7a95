# The lists of instances at scale: an index for their order (newest first), read backwards a page at a
# time instead of sorting every instance, and one for the admin's search by the beginning of an
# instance id. Both are built concurrently on PostgreSQL: the instance table is large and written all
# the time.

from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0017_limits'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['created_at', 'id'], name='dw_instance_recent'),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['instance_id'], name='dw_instance_id_prefix', opclasses=['varchar_pattern_ops']),
        ),
    ]
