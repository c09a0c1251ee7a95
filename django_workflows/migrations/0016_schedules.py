# Cron schedules: one row per declared expression, the oldest slot no worker has dealt with yet
# (django_workflows.store.schedules). A new table: nothing existing is locked or rewritten.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0015_instance_version'),
    ]

    operations = [
        migrations.CreateModel(
            name='Schedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('workflow_name', models.CharField(max_length=255)),
                ('key', models.CharField(help_text="The expression's and time zone's hash, as in its instance ids.", max_length=32)),
                ('cron', models.CharField(max_length=255)),
                ('timezone', models.CharField(max_length=64)),
                ('next_slot', models.DateTimeField(help_text='The oldest slot not yet created (or skipped by the catch-up policy).')),
                ('last_slot', models.DateTimeField(blank=True, help_text='The latest slot an instance was created for.', null=True)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('workflow_name', 'key'), name='dw_schedule_unique')],
            },
        ),
    ]
