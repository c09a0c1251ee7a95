# A step body that runs for minutes under a renewed lease is progress: the renewal marks it, so that its
# worker's death is not counted toward poison. Nullable, with no default: adding it rewrites no row, and
# workers of the previous release, which neither write nor read it, go on as before.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0018_instance_lists'),
    ]

    operations = [
        migrations.AlterField(
            model_name='instance',
            name='crash_count',
            field=models.PositiveIntegerField(default=0, help_text='Replays in a row that died holding the lease (a dead worker) without progress: no step finished, no step body ran on under a renewed lease.'),
        ),
        migrations.AddField(
            model_name='instance',
            name='progressed_at',
            field=models.DateTimeField(blank=True, help_text='When the replay holding the lease last renewed it from inside a step body: a step that runs for minutes is progress, and its worker\'s death is not counted toward poison.', null=True),
        ),
    ]
