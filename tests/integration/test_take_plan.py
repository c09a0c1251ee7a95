"""The take's look for a queued instance to start instead (priorities, ``leases._preferred_sql``) reads a
few rows whatever the statistics say.

A herd (thousands of sleepers due at the same second, queued by one UPDATE of the wake-up loop) leaves
PostgreSQL's statistics saying that no instance is queued. The look then joined the claimed instance to
the queued ones, and with the join's estimate at one row the planner found the claimed instance by
scanning the queued ones and compared every queued instance with it in a join filter: each take read
every queued instance, a herd of 10,000 read some 10^8 rows. Its bounds are now values of the claimed
instance, read by its primary key, and the queued instances of a higher priority are a range of the
partial index ``dw_instance_queue_turns``.
"""

import pytest
from django.db import connection, transaction

from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.store import leases

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

QUEUED = 2_000


def _fetched(cursor) -> int:
    """Rows of the instance table read so far in this transaction, through its indexes and by scans."""
    cursor.execute("SELECT COALESCE(idx_tup_fetch, 0) + COALESCE(seq_tup_read, 0) FROM pg_stat_xact_user_tables "
                   "WHERE relname = %s", [Instance._meta.db_table])
    return cursor.fetchone()[0]


def test_a_take_among_thousands_queued_at_once_reads_a_few_rows(workflows_env):
    # workflows_env's executor records the replays create() queues and runs none.
    for number in range(QUEUED):
        workflows.get("three-steps").create(id=f"herd-{number}")
    with connection.cursor() as cursor:
        # As the herd leaves them: analyzed while asleep, then all queued by one UPDATE since.
        cursor.execute("UPDATE django_workflows_instance SET status = 'waiting'")
        cursor.execute("ANALYZE django_workflows_instance")
        cursor.execute("UPDATE django_workflows_instance SET status = 'queued'")
        claimed = Instance.objects.order_by("-pk").values_list("pk", flat=True)[0]
        # In one transaction, whose own counts pg_stat_xact_user_tables shows.
        with transaction.atomic():
            before = _fetched(cursor)
            claim = leases.take(claimed, "worker:1", workflows_env.now, 60)
            read = _fetched(cursor) - before
    assert claim is not None
    assert read <= 6, f"the take read {read} rows of the instance table among {QUEUED} queued"
