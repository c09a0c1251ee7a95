# Concurrency and rate limits per workflow (django_workflows.limits): the claim counts a workflow's
# instances by status and age, and its recent starts. The index by workflow and status gains the
# creation time (and replaces the old one, which it serves as well); the starts get their own. Both are
# built concurrently on PostgreSQL, the old one dropped concurrently once the new one is there.

from django.db import migrations, models

from django_workflows.migration_operations import (
    AddIndexConcurrentlyOnPostgreSQL,
    RemoveIndexConcurrentlyOnPostgreSQL,
)


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0016_schedules'),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['workflow_name', 'status', 'created_at'], name='dw_instance_by_age'),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['workflow_name', 'started_at'], name='dw_instance_starts'),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            name='dw_instance_by_status',
        ),
    ]
