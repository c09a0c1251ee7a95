"""What a step's journal row costs the database beside its table: the index of its unique (instance, key)
alone, which leads with the instance and so serves the journal's reads and an instance's cascade. The
foreign key's own index on the instance (Django's default) was a second B-tree written at every step's
commit, for no query the first does not serve."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_workflows.models import Step
from django_workflows.store import journal_entries
from tests.index_catalog import full_indexes

pytestmark = pytest.mark.django_db

TABLE = Step._meta.db_table


def test_a_step_row_is_written_to_one_index_beside_its_table():
    assert sorted(full_indexes(TABLE).values()) == [(("instance_id", "key"), True)]


def test_the_journal_of_an_instance_is_read_through_the_unique_index():
    with CaptureQueriesContext(connection) as read:
        journal_entries.load(1)
    (sql,) = [query["sql"] for query in read.captured_queries]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The table is empty here: the planner would read it whole, which is not what is asked.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "dw_step_unique_key" in plan, plan
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = "\n".join(row[-1] for row in cursor.fetchall())
            # SQLite names the index of a table's UNIQUE constraint itself.
            cursor.execute("SELECT name FROM pragma_index_list(%s) WHERE origin = 'u'", [TABLE])
            (unique,) = [name for (name,) in cursor.fetchall()]
            assert f"USING INDEX {unique} (instance_id=?)" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_the_migration_drops_the_index_and_builds_it_again_backwards():
    single = (("instance_id",), False)
    call_command("migrate", "django_workflows", "0027", verbosity=0, skip_checks=True)
    try:
        assert single in full_indexes(TABLE).values()
        call_command("migrate", "django_workflows", "0028", verbosity=0, skip_checks=True)
        assert single not in full_indexes(TABLE).values()
        call_command("migrate", "django_workflows", "0027", verbosity=0, skip_checks=True)
        assert list(full_indexes(TABLE).values()).count(single) == 1
    finally:
        call_command("migrate", "django_workflows", verbosity=0, skip_checks=True)
    assert sorted(full_indexes(TABLE).values()) == [(("instance_id", "key"), True)]
