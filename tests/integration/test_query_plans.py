"""The request paths read the instance and step tables through their indexes, never whole, and make the
same number of queries whatever the number of instances.

Each test fills the tables with some thousands of instances and their journals (one instance with
2,000 steps), ANALYZEs them so that PostgreSQL's planner plans for tables of that size (as it would for
a million: an index that serves a query at this size serves it at any size, while a plan that reads a
table whole grows with it), calls the real view or function, and EXPLAINs every query it made. No
timing is measured here: ``make bench SCALE=1`` times the same paths over a million instances.

The counts exact up to ``counts.EXACT_UP_TO`` (1,000) read that many rows at most; here the bound is
scaled with the tables (20 of 6,000 instances, as 1,000 is of a million): a bound near the size of the
table would make reading the table whole the right plan for the planner, which it is not at scale.

PostgreSQL only: its planner is what is checked (tests/conftest.py deselects these on SQLite).
"""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.authtoken.models import Token

from django_workflows.shared import clock, counts
from django_workflows.store import dispatch, retention

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

WATCHED = ("django_workflows_instance", "django_workflows_step")
# Watched where the tags are loaded: an empty table, never analyzed, is read whole by any plan.
TAGGED = (*WATCHED, "django_workflows_instancetag")
INSTANCES = 6_000
BIG_STEPS = 2_000
LIST = "admin:django_workflows_instance_changelist"

# Every few instances of each shape, over the last month: mostly complete, some errored, terminated,
# waiting (with a wake time, some for an event), queued, running under a lease, paused.
FILL = """
INSERT INTO django_workflows_instance (
    workflow_name, instance_id, params, status, traceback, wake_at, waiting_for, current_step, lease_owner,
    lease_expires_at, epoch, created_at, started_at, ended_at, updated_at, crash_count, version)
SELECT
    (ARRAY['three-steps', 'sleeper', 'approval', 'loop'])[1 + i %% 4],
    'bulk-' || lpad(i::text, 6, '0'), '{}'::jsonb, shape.status, '',
    CASE WHEN shape.status = 'waiting' THEN %(now)s + (i %% 500) * interval '1 minute' END,
    CASE WHEN shape.status = 'waiting' AND i %% 4 = 2 THEN '["manager-approval"]'::jsonb END,
    CASE WHEN shape.status IN ('complete', 'errored', 'terminated') THEN '' ELSE 's-1' END,
    CASE WHEN shape.status = 'running' THEN 'host:1:1' ELSE '' END,
    CASE WHEN shape.status = 'running' THEN %(now)s + interval '1 minute' END,
    1, created, created, CASE WHEN shape.status IN ('complete', 'errored', 'terminated')
                              THEN created + interval '1 second' END,
    created + interval '1 second', 0, 'v' || (i * 5 / %(n)s)
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT %(now)s - (%(n)s - i) * interval '7 minutes' AS created,
                     (ARRAY['complete', 'complete', 'complete', 'complete', 'complete', 'complete', 'complete',
                            'complete', 'complete', 'complete', 'complete', 'complete', 'errored', 'terminated',
                            'waiting', 'waiting', 'queued', 'running', 'paused', 'complete'])[1 + i %% 20]
                         AS status) AS shape;
INSERT INTO django_workflows_step (instance_id, key, name, kind, status, attempts, started_at, ended_at, result)
SELECT instance.id, 's-' || n, 's', 'do', 'succeeded', '[]'::jsonb, instance.created_at, instance.created_at, '1'
FROM django_workflows_instance AS instance, generate_series(1, 4) AS n
WHERE instance.instance_id LIKE 'bulk-%%';
INSERT INTO django_workflows_step (instance_id, key, name, kind, status, attempts, started_at, ended_at, result)
SELECT instance.id, 's-' || n, 's', 'do', 'succeeded', '[]'::jsonb, instance.created_at, instance.created_at, '1'
FROM django_workflows_instance AS instance, generate_series(5, 4 + %(big)s) AS n
WHERE instance.instance_id = 'bulk-000003';
ANALYZE django_workflows_instance, django_workflows_step, django_workflows_event;
"""


def fill(n: int = INSTANCES, prefix: str = "bulk") -> None:
    with connection.cursor() as cursor:
        cursor.execute(FILL.replace("bulk-", f"{prefix}-"), {"n": n, "now": clock.now(), "big": BIG_STEPS})


@pytest.fixture(autouse=True)
def exact_up_to_scaled(monkeypatch):
    monkeypatch.setattr(counts, "EXACT_UP_TO", 20)


@pytest.fixture
def admin():
    client = Client()
    client.force_login(User.objects.create_superuser("plans", "plans@example.com", "pw"))
    return client


@pytest.fixture
def api(admin):
    token = Token.objects.create(user=User.objects.get(username="plans"))
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


@pytest.fixture
def filled():
    fill()
    from django_workflows.models import Instance

    return Instance.objects.get(instance_id="bulk-000003")


def sequential_scans(queries, watched=WATCHED) -> list[str]:
    """The queries of ``queries`` that read a ``watched`` table (the instance and step tables) whole, with
    their plans."""
    found = []
    for query in queries:
        sql = query["sql"]
        if sql.lstrip().split(None, 1)[0].upper() not in ("SELECT", "UPDATE", "DELETE", "WITH"):
            continue
        if not any(table in sql for table in watched):
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
            plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        nodes, todo = [], [(0, plan[0]["Plan"])]
        while todo:
            depth, node = todo.pop()
            nodes.append((depth, node))
            todo.extend((depth + 1, child) for child in reversed(node.get("Plans", ())))
        if any(node["Node Type"] == "Seq Scan" and node.get("Relation Name") in watched for _, node in nodes):
            lines = [f"{'  ' * depth}{node['Node Type']} {node.get('Index Name', '')} {node.get('Relation Name', '')} "
                     f"{node.get('Filter', node.get('Index Cond', ''))} rows={node['Plan Rows']}"
                     for depth, node in nodes]
            found.append(f"{sql[:2000]}\n" + "\n".join(lines))
    return found


def queries_of(call) -> list[dict]:
    with CaptureQueriesContext(connection) as captured:
        call()
    queries = list(captured.captured_queries)
    assert queries, "the path made no query: nothing was checked"
    return queries


def get(client, url, **params):
    def call():
        response = client.get(url, params)
        assert response.status_code == 200, response.content[:500]

    return call


ADMIN_LISTS = {
    "all": {},
    "errored": {"status__exact": "errored"},
    "complete": {"status__exact": "complete"},
    "paused": {"status__exact": "paused"},
    "a workflow": {"workflow": "sleeper"},
    "a workflow's waiting": {"workflow": "approval", "status__exact": "waiting"},
    "an id": {"q": "bulk-004321"},
    "an id's beginning": {"q": "bulk-0043"},
    "a later page": {"p": "40"},
}


@pytest.mark.parametrize("params", ADMIN_LISTS.values(), ids=ADMIN_LISTS.keys())
def test_the_admin_list_reads_no_table_whole(filled, admin, params):
    assert not sequential_scans(queries_of(get(admin, reverse(LIST), **params)))


def test_the_admin_pages_of_an_instance_of_thousands_of_steps_read_no_table_whole(filled, admin):
    page = reverse("admin:django_workflows_instance_change", args=[filled.pk])
    for params in ({}, {"steps_page": "40"}):
        assert not sequential_scans(queries_of(get(admin, page, **params)))
    assert not sequential_scans(queries_of(get(admin, reverse("admin:django_workflows_instance_workflows"))))
    assert not sequential_scans(queries_of(get(admin, reverse("admin:django_workflows_instance_approvals"))))


def test_the_api_reads_no_table_whole(filled, api):
    instances = reverse("django_workflows_api:instance-list", args=["three-steps"])
    detail = reverse("django_workflows_api:instance-detail", args=[filled.workflow_name, filled.instance_id])
    for url, params in ((instances, {}), (instances, {"status": "errored"}), (instances, {"page": "10"}),
                        (detail, {}), (detail, {"steps_page": "20"}),
                        (reverse("django_workflows_api:workflow-detail", args=["three-steps"]), {})):
        assert not sequential_scans(queries_of(get(api, url, **params))), (url, params)


def test_the_cli_list_reads_no_table_whole(filled):
    def listing():
        call_command("workflows", "instances", "list", "three-steps", stdout=io.StringIO())

    assert not sequential_scans(queries_of(listing))


def test_the_wake_up_loop_the_sweeper_and_retention_read_no_table_whole(filled):
    # A month later: the oldest finished instances are due for retention, some leases have expired.
    later = clock.now() + timedelta(days=10)

    def purge_batch():
        due = retention.due_by_setting(retention.purge_cutoff(later))
        batch = retention.next_purge_batch(due)
        assert batch
        retention.delete_finished(batch, due)

    for call in (dispatch.next_wake_time, lambda: dispatch.wake_due(later), lambda: dispatch.sweep(later),
                 purge_batch):
        with transaction.atomic():
            assert not sequential_scans(queries_of(call))


def test_the_admin_list_and_the_api_list_make_the_same_queries_for_ten_instances_as_for_thousands(admin, api):
    lists = [get(admin, reverse(LIST)), get(admin, reverse(LIST), status__exact="complete"),
             get(api, reverse("django_workflows_api:instance-list", args=["three-steps"]))]
    fill(20)
    for call in lists:
        call()  # the caches the first request fills (content types, permissions, the session)
    few = [len(queries_of(call)) for call in lists]
    fill(INSTANCES, prefix="more")
    assert [len(queries_of(call)) for call in lists] == few


def test_counts_above_the_bound_are_the_planners_estimates_and_say_so(filled, admin, api):
    listing = admin.get(reverse(LIST)).content.decode()
    assert 'class="dw-estimated"' in listing  # the list's count of its 6,001 instances
    assert "<strong>about " in listing  # the status bar's total
    page = api.get(reverse("django_workflows_api:instance-list", args=["sleeper"])).json()
    assert page["count_estimated"] is True and page["count"] > 20  # 1,500 stored
    none = api.get(reverse("django_workflows_api:instance-list", args=["uncaught"])).json()
    assert none["count_estimated"] is False and none["count"] == 0
    # The command line's table says so too; its JSON gives the numbers.
    out = io.StringIO()
    call_command("workflows", "list", stdout=out)
    assert "about " in out.getvalue()
    out = io.StringIO()
    call_command("workflows", "list", "--json", stdout=out)
    assert sum(json.loads(out.getvalue())["sleeper"].values()) > 20


# Every instance a tenant of 300 and a region of 4; every other one about a user, five instances a user.
TAG_AND_SUBJECT = """
INSERT INTO django_workflows_instancetag (instance_id, key, value)
SELECT id, 'tenant', 'tenant-' || (id %% 300) FROM django_workflows_instance
UNION ALL SELECT id, 'region', (ARRAY['eu', 'us', 'apac', 'latam'])[1 + id %% 4] FROM django_workflows_instance;
UPDATE django_workflows_instance SET subject_type_id = %(user)s, subject_id = (id / 10)::text WHERE id %% 2 = 0;
ANALYZE django_workflows_instance, django_workflows_instancetag;
"""


def test_the_tag_and_subject_filters_read_no_table_whole(filled, admin, api):
    with connection.cursor() as cursor:
        cursor.execute(TAG_AND_SUBJECT, {"user": ContentType.objects.get_for_model(User).pk})
    subject = f"auth.user:{filled.pk // 10 + 50}"
    instances = reverse("django_workflows_api:instance-list", args=["three-steps"])
    for params in ({"tag.tenant": "tenant-42"}, {"tag.region": "eu"}, {"tag.tenant": "tenant-42", "tag.region": "eu"},
                   {"subject": subject}):
        assert not sequential_scans(queries_of(get(api, instances, **params)), TAGGED), params
    for params in ({"tag": "tenant=tenant-42"}, {"tag": "region=eu"}, {"subject": subject}):
        assert not sequential_scans(queries_of(get(admin, reverse(LIST), **params)), TAGGED), params
    for args in (("--tag", "tenant=tenant-42"), ("--subject", subject)):
        listing = lambda: call_command("workflows", "instances", "list", "three-steps", *args,  # noqa: E731
                                       stdout=io.StringIO())
        assert not sequential_scans(queries_of(listing), TAGGED), args
