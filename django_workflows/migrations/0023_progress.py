# step.progress and results that can be awaited (issue 36, item 5).
#
# step.progress's markers are a new journal kind, a change of choices only (no SQL), found latest first
# by a partial index of the journal that holds the markers alone (built concurrently on PostgreSQL: the
# journal is the largest table). On PostgreSQL, two triggers NOTIFY the channel django_workflows_instance
# with the instance's primary key, on commit: when an instance ends (complete, errored, terminated), and
# when a progress marker is written, so that a caller waiting for an instance's result, or a stream of
# its progress, wakes at once instead of polling (django_workflows.instance_watch). Other databases poll.

from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL

CHANNEL = "django_workflows_instance"

INSTALL = f"""
CREATE OR REPLACE FUNCTION django_workflows_instance_ended_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', NEW.id::text);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS django_workflows_instance_ended ON django_workflows_instance;
CREATE TRIGGER django_workflows_instance_ended AFTER UPDATE OF status ON django_workflows_instance
    FOR EACH ROW WHEN (NEW.status IN ('complete', 'errored', 'terminated') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION django_workflows_instance_ended_notify();

CREATE OR REPLACE FUNCTION django_workflows_progress_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', NEW.instance_id::text);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS django_workflows_progress ON django_workflows_step;
CREATE TRIGGER django_workflows_progress AFTER INSERT ON django_workflows_step
    FOR EACH ROW WHEN (NEW.kind = 'progress') EXECUTE FUNCTION django_workflows_progress_notify();
"""

UNINSTALL = """
DROP TRIGGER IF EXISTS django_workflows_instance_ended ON django_workflows_instance;
DROP FUNCTION IF EXISTS django_workflows_instance_ended_notify();
DROP TRIGGER IF EXISTS django_workflows_progress ON django_workflows_step;
DROP FUNCTION IF EXISTS django_workflows_progress_notify();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INSTALL)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNINSTALL)


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0022_deadlines_and_successors'),
    ]

    operations = [
        migrations.AlterField(
            model_name='step',
            name='kind',
            field=models.CharField(choices=[('do', 'step.do'), ('sleep', 'step.sleep'), ('waitForEvent', 'step.wait_for_event'), ('patch', 'step.patched'), ('tags', 'step.set_tags'), ('progress', 'step.progress')], max_length=16),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='step',
            index=models.Index(condition=models.Q(('kind', 'progress')), fields=['instance', 'id'], name='dw_step_progress'),
        ),
        migrations.RunPython(install, uninstall, elidable=False),
    ]
