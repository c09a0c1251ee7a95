# Child workflows (step.child): the link from a child instance to its parent, the parent's step that
# started it, and what the parent's terminate or restart does to it.
#
# The link and the step are nullable (a previous release's worker inserts
# instances without them, and the database fills NULL); the policy is not, so it has a database default
# (db_default) as well as Django's. The link is not a database foreign key: retention deletes a finished
# parent by itself, with raw deletes, and its children keep the id it had. Its index is partial (only
# instances with a parent), and built concurrently on PostgreSQL.

import django.db.models.deletion
from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL
from django_workflows.migration_reruns import AddFieldOnce


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0013_cpu_time'),
    ]

    operations = [
        AddFieldOnce(
            model_name='instance',
            name='on_parent_end',
            field=models.CharField(choices=[('terminate', 'Terminate'), ('abandon', 'Abandon')], db_default='terminate', default='terminate', help_text="What the parent's terminate or restart does to this child while it runs.", max_length=16),
        ),
        AddFieldOnce(
            model_name='instance',
            name='parent',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, default=None, help_text='The instance whose step.child() started this one.', null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='children', to='django_workflows.instance'),
        ),
        AddFieldOnce(
            model_name='instance',
            name='parent_step',
            field=models.CharField(blank=True, default=None, help_text="The key of the parent's step that started this child.", max_length=300, null=True),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('parent__isnull', False)), fields=['parent'], name='dw_instance_parent'),
        ),
    ]
