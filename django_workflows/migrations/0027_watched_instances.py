# The end of an instance is notified only when something waits for it (Instance.watched, set by the
# watch of shared.instance_watch before it looks). PostgreSQL serializes the commits of transactions that
# NOTIFY (a lock on the notification queue taken at commit and held through its flush): with every end
# notified, the replays that completed instances at once committed one after the other. The progress
# markers' trigger is unchanged: they are few, and a stream waits for them.
#
# Not atomic, so that the instance table's locks are held for one statement each. The column is added in a
# transaction of its own (a catalog change: the default is a constant), and the trigger is replaced by
# one statement committed on its own. CREATE OR REPLACE TRIGGER (PostgreSQL 14, the oldest Django 5.2
# supports) takes SHARE ROW EXCLUSIVE, which lets reads through, where DROP TRIGGER takes ACCESS
# EXCLUSIVE. An atomic migration held ACCESS EXCLUSIVE from the column's ALTER TABLE to its commit, across
# the Python Django runs between operations. On a loaded machine that took past 200 ms, and the live
# traffic of tests/system/test_migrations_live.py gave up on a lock. Stopped half-way, the migration is
# run again whole: the column is added once (AddFieldOnce) and the trigger replaced again.

from django.db import migrations, models

from django_workflows.migration_reruns import AddFieldOnce

ENDED = """
CREATE OR REPLACE TRIGGER django_workflows_instance_ended AFTER UPDATE OF status ON django_workflows_instance
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

    atomic = False

    dependencies = [
        ('django_workflows', '0026_held_instance_wake'),
    ]

    operations = [
        AddFieldOnce(
            model_name='instance',
            name='watched',
            field=models.BooleanField(db_default=False, default=False, help_text='A caller waits for its result or streams its progress: its end is notified (PostgreSQL).'),
        ),
        migrations.RunPython(notify_watched, notify_every_end, elidable=False),
    ]
