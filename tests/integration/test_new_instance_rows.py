"""A new instance's unsaved row (``new_instances.unsaved``) is the one ``Instance(**values)`` builds, without
``Model.__init__``'s work for each field at every create; a receiver of Instance's ``pre_init`` or
``post_init`` still runs for every instance created."""

from datetime import timedelta

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext

from django_workflows import executors, workflows
from django_workflows.client.new_instances import new_instance, unsaved
from django_workflows.models import Instance
from django_workflows.shared import clock
from django_workflows.testing import RecordingExecutor


def _fields(row: Instance) -> dict:
    return {name: value for name, value in row.__dict__.items() if name != "_state"}


def test_the_row_is_the_one_the_model_builds():
    now = clock.now()
    values = {"workflow_name": "w", "instance_id": "i", "params": {"a": 1}, "status": "queued",
              "created_at": now, "updated_at": now, "queue": "q", "priority": 3, "turn_at": now,
              "timeout": timedelta(days=1), "deadline": now + timedelta(days=1), "limit_key": "acme"}
    row = unsaved(**values)
    assert _fields(row) == _fields(Instance(**values))
    assert row._state.adding and row._state.db is None and row.pk is None


def test_every_row_has_its_own_values():
    first = unsaved(workflow_name="w", instance_id="one")
    first.status, first.epoch = "running", 7
    second = unsaved(workflow_name="w", instance_id="two")
    assert (second.status, second.epoch) == (Instance().status, 0)
    assert first._state is not second._state


def test_a_field_the_model_does_not_have_is_refused():
    with pytest.raises(TypeError, match="nonsense"):
        unsaved(workflow_name="w", nonsense=1)


@pytest.mark.django_db
def test_a_new_instance_with_a_subject_is_the_row_the_model_builds():
    subject = ContentType.objects.get_for_model(Instance)  # any row of any model will do
    row = new_instance(workflows.get("returns-its-last-step").workflow_class, "returns-its-last-step", "bound",
                       {"n": 1}, subject=subject, tags={"tenant": "acme"}, priority=2)
    assert _fields(Instance(**{**_fields(row), "subject_type": row.subject_type})) == _fields(row)
    assert row.subject_type == ContentType.objects.get_for_model(ContentType)
    assert row.subject_id == str(subject.pk) and row.priority == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inline_executor")
def test_a_post_init_receiver_of_instance_runs_for_every_instance_created():
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.instance_id)

    post_init.connect(receiver, sender=Instance)
    try:
        workflows.get("returns-its-last-step").create(id="watched")
        workflows.get("returns-its-last-step").create_batch([{"id": "batched"}])
    finally:
        post_init.disconnect(receiver, sender=Instance)
    assert {"watched", "batched"} <= set(seen)


@pytest.fixture
def recorded():
    """Replays recorded, not run: the instances stay queued."""
    executors.push_override(RecordingExecutor())
    yield
    executors.pop_override()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("recorded")
def test_a_batch_over_several_statements_stores_each_new_row_and_skips_the_ids_that_exist():
    handle = workflows.get("returns-its-last-step")
    handle.create(id="b-7", params={"old": True})
    handle.create(id="b-40", params={"old": True})
    with CaptureQueriesContext(connection) as queries:
        created = handle.create_batch([{"id": f"b-{n}", "params": {"n": n}, "priority": n % 10,
                                        "timeout": "1 day"} for n in range(60)])
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT") and "instance" in q["sql"]]
    fields = len([f for f in Instance._meta.concrete_fields if not f.primary_key])
    per_statement = (connection.features.max_query_params or 60 * fields) // fields
    assert len(inserts) == -(-60 // per_statement)
    assert [h.id for h in created] == [f"b-{n}" for n in range(60)]
    rows = {row.instance_id: row for row in Instance.objects.filter(instance_id__startswith="b-")}
    assert len(rows) == 60
    assert rows["b-7"].params == rows["b-40"].params == {"old": True}
    for n in (0, 23, 24, 25, 59):
        row = rows[f"b-{n}"]
        assert (row.params, row.priority, row.timeout, row.status) == ({"n": n}, n % 10, timedelta(days=1), "queued")
        assert row.deadline == row.created_at + timedelta(days=1) and row.turn_at is not None
