# Instances bound to the rows they are about, and tags they are searched by (issue 35).
#
# The subject is two nullable columns (a content type and the primary key as text): adding them to a
# populated table rewrites no row; its index is partial (only instances bound to a row) and built
# concurrently on PostgreSQL. Tags live in a table of their own, one row per key, indexed on
# (key, value): new and empty, it needs nothing concurrent. step.set_tags's markers are a new journal
# kind, a change of choices only (no SQL).

import django.db.models.deletion
from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL
from django_workflows.migration_reruns import (
    AddConstraintOnce,
    AddFieldOnce,
    AddIndexOnce,
    CreateModelOnce,
)


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('django_workflows', '0020_deliveries'),
    ]

    operations = [
        CreateModelOnce(
            name='InstanceTag',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(max_length=64)),
                ('value', models.CharField(max_length=255)),
            ],
        ),
        AddFieldOnce(
            model_name='instance',
            name='subject_id',
            field=models.CharField(blank=True, default=None, help_text='The primary key of the row the instance is about, as text.', max_length=255, null=True),
        ),
        AddFieldOnce(
            model_name='instance',
            name='subject_type',
            field=models.ForeignKey(blank=True, db_index=False, default=None, help_text='The model of the row the instance is about.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='contenttypes.contenttype'),
        ),
        migrations.AlterField(
            model_name='step',
            name='kind',
            field=models.CharField(choices=[('do', 'step.do'), ('sleep', 'step.sleep'), ('waitForEvent', 'step.wait_for_event'), ('patch', 'step.patched'), ('tags', 'step.set_tags')], max_length=16),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('subject_type__isnull', False)), fields=['subject_type', 'subject_id'], name='dw_instance_subject'),
        ),
        AddFieldOnce(
            model_name='instancetag',
            name='instance',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tags', to='django_workflows.instance'),
        ),
        AddIndexOnce(
            model_name='instancetag',
            index=models.Index(fields=['key', 'value', 'instance'], name='dw_tag_lookup'),
        ),
        AddConstraintOnce(
            model_name='instancetag',
            constraint=models.UniqueConstraint(fields=('instance', 'key'), name='dw_tag_one_per_key'),
        ),
    ]
