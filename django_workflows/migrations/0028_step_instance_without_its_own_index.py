from django.db import migrations

from django_workflows.migration_index_drops import DropForeignKeyIndex


class Migration(migrations.Migration):
    """The journal's foreign key to its instance had an index of its own beside the unique constraint on
    (instance, key), whose index leads with the same column and serves every query the first did (the
    journal's reads, the cascade of an instance's deletion). Every step's commit wrote both."""

    # DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0027_watched_instances'),
    ]

    operations = [
        DropForeignKeyIndex(model_name='step', name='instance'),
    ]
