from django.db import migrations, models

from django_workflows.migration_operations import (
    AddConstraintConcurrentlyOnPostgreSQL,
    RemoveIndexConcurrentlyOnPostgreSQL,
    RemoveUniqueConstraint,
)


class Migration(migrations.Migration):
    """An instance's id and its workflow's name are unique together in one index that the id leads, in
    PostgreSQL's pattern operator class: it serves the lookups by workflow and id and the admin's search
    by an id's beginning, which each had an index of their own that every INSERT wrote. The new index is
    built before the old ones are dropped, so that the uniqueness and the search are never without one.
    On SQLite the table is copied once, to drop the old constraint (a table's own constraint there)."""

    # CREATE INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0029_retention_index_of_ended_instances'),
    ]

    operations = [
        AddConstraintConcurrentlyOnPostgreSQL(
            model_name='instance',
            constraint=models.UniqueConstraint(fields=('instance_id', 'workflow_name'), name='dw_instance_unique_by_id',
                                               opclasses=['varchar_pattern_ops', 'varchar_pattern_ops']),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            name='dw_instance_id_prefix',
        ),
        RemoveUniqueConstraint(
            model_name='instance',
            name='dw_instance_unique_id',
        ),
    ]
