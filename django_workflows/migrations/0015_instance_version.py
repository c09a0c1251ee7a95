# The code version each instance was created under, and step.patched's marker rows in the journal.
#
# The column has a database default (db_default) as well as Django's: a
# worker of the previous release in a rolling deploy, and the benchmarks' bulk insert, insert instances
# without it. On PostgreSQL, adding a column with a constant default rewrites nothing; the index for the
# admin's filter by version is built concurrently. The new step kind changes no column.

from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL
from django_workflows.migration_reruns import AddFieldOnce


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0014_child_workflows'),
    ]

    operations = [
        AddFieldOnce(
            model_name='instance',
            name='version',
            field=models.CharField(blank=True, db_default='', default='', help_text="The code version it was created under: its workflow's version attribute, else the VERSION setting; empty when neither was set.", max_length=100),
        ),
        migrations.AlterField(
            model_name='step',
            name='kind',
            field=models.CharField(choices=[('do', 'step.do'), ('sleep', 'step.sleep'), ('waitForEvent', 'step.wait_for_event'), ('patch', 'step.patched')], max_length=16),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['workflow_name', 'version'], name='dw_instance_version'),
        ),
    ]
