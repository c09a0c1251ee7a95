"""PostgreSQL only: triggers that NOTIFY an idle worker of new work (see django_workflows.changes).

- ``django_workflows_queue``: a task was added to django-q2's ORM queue, so the broker's pusher looks now
  instead of polling the table several times a second;
- ``django_workflows_wake``: an instance started waiting with a wake time, so the wake-up loop
  recomputes when to wake instead of looking every second.

Notifications are sent when the transaction commits, once per channel and transaction.
"""

from django.apps import apps as installed_apps
from django.db import migrations

FUNCTIONS = {
    "django_workflows_queue": "django_q_ormq",
    "django_workflows_wake": "django_workflows_instance",
}

INSTALL = """
CREATE OR REPLACE FUNCTION {name}_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{name}', '');
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS {name} ON {table};
CREATE TRIGGER {name} AFTER {events} ON {table} {each} EXECUTE FUNCTION {name}_notify();
"""

EVENTS = {
    "django_workflows_queue": ("INSERT", "FOR EACH STATEMENT"),
    "django_workflows_wake": (
        "INSERT OR UPDATE OF status, wake_at",
        "FOR EACH ROW WHEN (NEW.status = 'waiting' AND NEW.wake_at IS NOT NULL)",
    ),
}


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    tables = schema_editor.connection.introspection.table_names()
    for name, table in FUNCTIONS.items():
        if table not in tables:
            continue  # django-q2's queue lives in another database: its broker polls
        events, each = EVENTS[name]
        schema_editor.execute(INSTALL.format(name=name, table=table, events=events, each=each))


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, table in FUNCTIONS.items():
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}; DROP FUNCTION IF EXISTS {name}_notify();")


class Migration(migrations.Migration):

    # After django-q2's queue table, when django-q2 is installed: a project that runs replays on another
    # executor (the package's q2 extra left out) has no such table, and install() skips its trigger.
    dependencies = [("django_workflows", "0004_wake_index")] + (
        [("django_q", "0007_ormq")] if installed_apps.is_installed("django_q") else []
    )

    operations = [migrations.RunPython(install, uninstall, elidable=False)]
