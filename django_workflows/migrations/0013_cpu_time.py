# What each instance's replays cost: CPU time and the time its step attempts took.
#
# Named 0012 and depending on 0010: another change adds a 0011 beside it, and the merge migration that
# joins the two fixes the chain. Both columns have a database default (db_default) as well as Django's:
# a worker of the previous release in a rolling deploy, and the benchmarks' bulk insert, insert
# instances without them. On PostgreSQL, adding a column with a constant default rewrites nothing.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0012_instance_retention'),
    ]

    operations = [
        migrations.AddField(
            model_name='instance',
            name='cpu_ms',
            field=models.FloatField(db_default=0.0, default=0.0, help_text='Milliseconds of CPU time its replays used: run() and the step bodies, in every thread the engine ran them in; waiting does not count.'),
        ),
        migrations.AddField(
            model_name='instance',
            name='step_wall_ms',
            field=models.FloatField(db_default=0.0, default=0.0, help_text='Milliseconds its step attempts took, end to end (waits on I/O included; sleeps and waits for events not).'),
        ),
        migrations.AlterField(
            model_name='step',
            name='attempts',
            field=models.JSONField(blank=True, default=list, help_text='[{attempt, start, end, success, cpu_ms, wall_ms, error}]'),
        ),
    ]
