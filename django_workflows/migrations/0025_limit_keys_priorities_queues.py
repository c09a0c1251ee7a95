# Keyed limits, priorities and queues (issue 36, items 1 and 2): four columns on the instance table and
# three indexes built concurrently on PostgreSQL.
#
# queue, priority and limit_key have constant database defaults, so adding them rewrites no row (a
# metadata change on PostgreSQL, ALTER TABLE ADD COLUMN on SQLite). turn_at is nullable; the instances
# still to start are given theirs (their creation time: priority 0) so that they keep their order
# beside new ones; a finished instance never needs one.

from django.db import migrations, models

from django_workflows.migration_operations import AddIndexConcurrentlyOnPostgreSQL
from django_workflows.migration_reruns import AddFieldOnce

_TO_START = ("queued", "waiting", "running", "paused", "waitingForPause")


# Rows given their turn per statement: each statement commits on its own (the migration is not atomic),
# so it holds the row locks of one batch for milliseconds, never those of every instance to start at
# once, which would hold up the running workers' writes for as long as the whole update took.
BATCH = 1000


def give_turns(apps, schema_editor):
    Instance = apps.get_model("django_workflows", "Instance")
    rows = Instance.objects.using(schema_editor.connection.alias)
    last = rows.order_by("-pk").values_list("pk", flat=True).first() or 0
    for start in range(0, last + 1, BATCH):
        rows.filter(pk__gte=start, pk__lt=start + BATCH, status__in=_TO_START, turn_at__isnull=True).update(
            turn_at=models.F("created_at"))


class Migration(migrations.Migration):

    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ('django_workflows', '0024_delayed_start_and_debounce'),
    ]

    operations = [
        AddFieldOnce(
            model_name='instance',
            name='queue',
            field=models.CharField(db_default='default', default='default', help_text='The queue its replays are routed to: only workers serving it run it.', max_length=64),
        ),
        AddFieldOnce(
            model_name='instance',
            name='priority',
            field=models.PositiveSmallIntegerField(db_default=0, default=0, help_text='0 to 9: a queued instance of higher priority starts first.'),
        ),
        AddFieldOnce(
            model_name='instance',
            name='turn_at',
            field=models.DateTimeField(blank=True, default=None, help_text='Its place among the queued instances of its queue: its creation brought forward by PRIORITY_AGING_SECONDS per point of priority.', null=True),
        ),
        AddFieldOnce(
            model_name='instance',
            name='limit_key',
            field=models.CharField(blank=True, db_default='', default='', help_text="What its workflow's keyed concurrency and rate limits count it by (a customer, a tenant); empty when they are not keyed.", max_length=255),
        ),
        migrations.RunPython(give_turns, migrations.RunPython.noop, atomic=False, elidable=True),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['workflow_name', 'limit_key', 'status', 'turn_at'], name='dw_instance_key_turns'),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(fields=['workflow_name', 'limit_key', 'started_at'], name='dw_instance_key_starts'),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name='instance',
            index=models.Index(condition=models.Q(('status', 'queued')), fields=['status', 'queue', 'priority', 'turn_at'], name='dw_instance_queue_turns'),
        ),
    ]
