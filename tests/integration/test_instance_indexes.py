"""What an instance's row costs the database beside its table: one index leads with the instance's id,
the unique one of (id, workflow), in PostgreSQL's pattern operator class, so that it serves the lookups
by workflow and id and the admin's search by an id's beginning alike. Each had an index of its own that
every INSERT wrote, and every UPDATE on PostgreSQL that moved the row."""

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from django_workflows import workflows
from django_workflows.models import Instance, Step
from tests.index_catalog import full_indexes, index_definition, query_plan

pytestmark = pytest.mark.django_db

TABLE = Instance._meta.db_table
BY_ID = (("instance_id", "workflow_name"), True)


def _leading_with_the_id() -> list[tuple[tuple[str, ...], bool]]:
    return [index for index in full_indexes(TABLE).values() if index[0][0] == "instance_id"]


def test_one_index_leads_with_the_instance_id_and_it_is_the_unique_one():
    assert _leading_with_the_id() == [BY_ID]
    assert (("workflow_name", "instance_id"), True) not in full_indexes(TABLE).values()


@pytest.mark.postgres
def test_it_is_in_the_pattern_operator_class_on_postgresql():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'dw_instance_unique_by_id'")
        (definition,) = cursor.fetchone()
    assert "UNIQUE" in definition and definition.count("varchar_pattern_ops") == 2, definition


def test_an_id_is_still_unique_within_its_workflow_and_only_there(workflows_env):
    workflows.get("three-steps").create(id="order-1")
    workflows.get("loop").create(id="order-1", params={"n": 1})  # another workflow: allowed
    row = Instance.objects.get(workflow_name="three-steps", instance_id="order-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Instance.objects.create(workflow_name="three-steps", instance_id="order-1", created_at=row.created_at,
                                updated_at=row.updated_at)
    assert Instance.objects.filter(instance_id="order-1").count() == 2


def test_a_lookup_by_workflow_and_id_reads_the_unique_index():
    plan = query_plan(Instance.objects.filter(workflow_name="three-steps", instance_id="order-1").values("pk"))
    assert "dw_instance_unique_by_id" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_the_migration_folds_the_two_indexes_into_one_and_back():
    old_unique, old_prefix = (("workflow_name", "instance_id"), True), (("instance_id",), False)
    call_command("migrate", "django_workflows", "0029", verbosity=0, skip_checks=True)
    try:
        before = full_indexes(TABLE)
        assert old_unique in before.values() and old_prefix in before.values() and BY_ID not in before.values()
        # Rows made before it keep their journal: SQLite copies the instance table to drop its constraint.
        now = timezone.now()
        kept = Instance.objects.create(workflow_name="three-steps", instance_id="kept", created_at=now, updated_at=now)
        Step.objects.create(instance=kept, key="a-1", name="a", kind="do", status="succeeded", started_at=now,
                            result=1)
        call_command("migrate", "django_workflows", "0030", verbosity=0, skip_checks=True)
        assert _leading_with_the_id() == [BY_ID]
        assert old_unique not in full_indexes(TABLE).values()
        assert list(Step.objects.filter(instance__instance_id="kept").values_list("key", "result")) == [("a-1", 1)]
        with pytest.raises(IntegrityError), transaction.atomic():
            Instance.objects.create(workflow_name="three-steps", instance_id="kept", created_at=now, updated_at=now)
        call_command("migrate", "django_workflows", "0029", verbosity=0, skip_checks=True)
        back = list(full_indexes(TABLE).values())
        assert back.count(old_unique) == 1 and back.count(old_prefix) == 1 and BY_ID not in back
    finally:
        call_command("migrate", "django_workflows", verbosity=0, skip_checks=True)
    assert _leading_with_the_id() == [BY_ID]


# -- a keyed rate limit's starts ------------------------------------------------------------------------

def test_the_index_of_keyed_starts_holds_only_the_instances_that_have_a_key():
    # Most workflows have no keyed limit: an index of every instance's starts by key was written by each
    # INSERT (and each first start) for nothing.
    indexes = full_indexes(TABLE)
    assert (("workflow_name", "limit_key", "started_at"), False) not in indexes.values(), indexes
    definition = index_definition("dw_instance_keyed_starts")
    assert "(workflow_name, limit_key, started_at)" in definition.replace('"', ""), definition
    assert "WHERE" in definition and "limit_key" in definition.split("WHERE")[1], definition


@pytest.mark.parametrize("keyed", [True, False])
def test_the_claim_s_rate_window_reads_walk_an_index_of_starts(keyed):
    from django_workflows.store.leases import rate_window_sql

    table = connection.ops.quote_name(TABLE)
    since = connection.ops.adapt_datetimefield_value(timezone.now())
    params = ["per-tenant", *(["acme"] if keyed else []), since, 0]
    plan = query_plan(rate_window_sql(table, keyed), params)
    assert ("dw_instance_keyed_starts" if keyed else "dw_instance_starts") in plan, plan
    assert "TEMP B-TREE" not in plan and "Sort" not in plan, plan
