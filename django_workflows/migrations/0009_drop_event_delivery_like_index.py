from django.db import migrations

from django_workflows.migration_index_drops import DropLikeIndexOnPostgreSQL


class Migration(migrations.Migration):
    """Databases migrated through 0006 before it built the delivery's unique index on its own have
    a second index on the column, for LIKE queries, that no query uses (deliveries are looked up by
    equality) and that every event written updates."""

    # DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0008_waiting_reason'),
    ]

    operations = [
        DropLikeIndexOnPostgreSQL(model_name='event', name='delivery'),
    ]
