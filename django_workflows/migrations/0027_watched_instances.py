# The end of an instance is notified only when something waits for it (Instance.watched, set by the
# watch of shared.instance_watch before it looks). PostgreSQL serializes the commits of transactions that
# NOTIFY (a lock on the notification queue taken at commit and held through its flush): with every end
# notified, the replays that completed instances at once committed one after the other. The progress
# markers' trigger is unchanged: they are few, and a stream waits for them.

from django.db import migrations, models

ENDED = """
DROP TRIGGER IF EXISTS django_workflows_instance_ended ON django_workflows_instance;
CREATE TRIGGER django_workflows_instance_ended AFTER UPDATE OF status ON django_workflows_instance
    FOR EACH ROW WHEN ({watched}NEW.status IN ('complete', 'errored', 'terminated')
                       AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION django_workflows_instance_ended_notify();
"""


def notify_watched(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ENDED.format(watched="NEW.watched AND "))


def notify_every_end(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ENDED.format(watched=""))


class Migration(migrations.Migration):

    dependencies = [
        ('django_workflows', '0026_held_instance_wake'),
    ]

    operations = [
        migrations.AddField(
            model_name='instance',
            name='watched',
            field=models.BooleanField(db_default=False, default=False, help_text='A caller waits for its result or streams its progress: its end is notified (PostgreSQL).'),
        ),
        migrations.RunPython(notify_watched, notify_every_end, elidable=False),
    ]
