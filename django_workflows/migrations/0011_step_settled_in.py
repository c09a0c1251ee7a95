# A nullable column: rows a previous release writes leave it NULL, which a replay reads as "not
# settled in a round of its own" (a def run() step, or a step awaited alone).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0010_terminating'),
    ]

    operations = [
        migrations.AddField(
            model_name='step',
            name='settled_in',
            field=models.PositiveIntegerField(blank=True, help_text="An async run()'s round in which the outcome reached run(): steps awaited together share one, and a replay hands them back in the same rounds.", null=True),
        ),
    ]
