# Deadlines and continue-as-new (issue 36, item 4).
#
# Four nullable columns on the instance table, no default beyond NULL and no index: adding them to a
# populated table rewrites no row on PostgreSQL (and is an ALTER TABLE ADD COLUMN on SQLite), and a
# worker of the previous release, inserting instances without them, leaves them NULL: no deadline, no
# family. The deadline is read from the row a replay claims, and its wake time is stored in wake_at, whose
# index the wake-up loop reads already; the links are read from the instance's own row.

import django.db.models.deletion
from django.db import migrations, models

from django_workflows.migration_reruns import AddFieldOnce


class Migration(migrations.Migration):
    # Each ALTER commits on its own: in one transaction the four held the table's ACCESS EXCLUSIVE lock
    # until the last, long enough on a loaded machine (296 ms) that a worker's read gave up behind it.
    # Run again after a stop, each passes over its column if it is there (AddFieldOnce).
    atomic = False

    dependencies = [
        ('django_workflows', '0021_subject_and_tags'),
    ]

    operations = [
        AddFieldOnce(
            model_name='instance',
            name='deadline',
            field=models.DateTimeField(blank=True, default=None, help_text='When the instance ends errored with WorkflowTimeoutError if it has not ended: its creation (or last restart) plus its timeout.', null=True),
        ),
        AddFieldOnce(
            model_name='instance',
            name='predecessor',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, default=None, help_text='The instance that continued as new as this one.', null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='django_workflows.instance'),
        ),
        AddFieldOnce(
            model_name='instance',
            name='successor',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, default=None, help_text='The instance this one continued as new as.', null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='django_workflows.instance'),
        ),
        AddFieldOnce(
            model_name='instance',
            name='timeout',
            field=models.DurationField(blank=True, default=None, help_text='How long the instance may take before it ends errored with WorkflowTimeoutError; null: no deadline.', null=True),
        ),
    ]
