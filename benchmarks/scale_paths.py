"""The scale benchmark's measurements: each request path timed over repeated calls, its queries explained.

A path is a callable run ``repeat`` times after one warm-up call; the warm-up's queries are captured
(``CaptureQueriesContext``) and each that reads or writes the workflow tables is explained with
``EXPLAIN (FORMAT JSON)`` (not ANALYZE: an UPDATE or DELETE explained is not run). The loops that write
(the wake-up claim, the sweeper, retention) run inside a transaction that is rolled back, so every
repetition finds the same rows.
"""

from __future__ import annotations

import io
import time
from datetime import datetime

from benchmarks import scale_load
from benchmarks.common import log, percentile

GOAL_MS = 300.0
"""Every page and endpoint's goal: a p99 of at most this."""
WATCHED = ("django_workflows_instance", "django_workflows_step", "django_workflows_instancetag")
"""The tables no request path may read sequentially."""


class Rollback(Exception):
    pass


def _rolled_back(function):
    from django.db import transaction

    def run():
        try:
            with transaction.atomic():
                function()
                raise Rollback
        except Rollback:
            pass

    return run


def plan_nodes(plan: dict):
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)


def describe_node(node: dict) -> str:
    text = node["Node Type"]
    if node.get("Index Name"):
        text += f" using {node['Index Name']}"
    if node.get("Relation Name"):
        text += f" on {node['Relation Name']}"
    return f"{text} (rows={node.get('Plan Rows')})"


def explain(sql: str) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        return cursor.fetchone()[0][0]["Plan"]


def _explained(queries) -> list[dict]:
    explained = []
    for query in queries:
        sql = query["sql"]
        head = sql.lstrip().split(None, 1)[0].upper()
        if head not in ("SELECT", "UPDATE", "DELETE", "WITH") or "django_workflows_" not in sql:
            continue
        plan = explain(sql)
        nodes = list(plan_nodes(plan))
        scans = [describe_node(n) for n in nodes if "Scan" in n["Node Type"] and n.get("Relation Name")]
        seq = [n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in WATCHED]
        explained.append({"sql": sql[:300], "scans": scans, "seq_scans": seq, "cost": plan.get("Total Cost")})
    return explained


def time_path(name: str, call, repeat: int, goal_ms: float | None) -> dict:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    reset_queries()
    with CaptureQueriesContext(connection) as captured:
        call()
    # A copy: captured_queries reads the connection's log, which each request of the test client clears.
    queries = list(captured.captured_queries)
    explained = _explained(queries)
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        call()
        timings.append((time.perf_counter() - began) * 1000)
    p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
    seq = sorted({table for query in explained for table in query["seq_scans"]})
    met = (goal_ms is None or p99 <= goal_ms) and not seq
    log(f"   {name}: p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(queries)} queries"
        f"{', SEQ SCAN of ' + ', '.join(seq) if seq else ''}")
    return {"name": name, "p50": p50, "p99": p99, "goal_ms": goal_ms, "queries": len(queries), "repeat": repeat,
            "explained": explained, "seq_scans": seq, "met": met}


def _checked(client, url, **params):
    def get():
        response = client.get(url, params)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url} {params} answered {response.status_code}")
        return response

    return get


def measure(loaded: dict, repeat: int) -> list[dict]:
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse
    from rest_framework.authtoken.models import Token

    try:
        from django_workflows.reading.describe import status_totals
    except ImportError:  # a release before the estimated counts: measured as it was
        from django_workflows.reading.describe import status_counts as status_totals
    from django_workflows.models import Instance
    from django_workflows.store import dispatch, retention

    setup_test_environment()  # the test client's host, "testserver", allowed
    user = User.objects.filter(username="scale").first() or User.objects.create_superuser(
        "scale", "scale@example.com", "scale")
    admin = Client()
    admin.force_login(user)
    token, _ = Token.objects.get_or_create(user=user)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")

    big = Instance.objects.get(pk=loaded["big_instance"])
    some = Instance.objects.filter(workflow_name="bench-three").order_by("pk")[5000:5001].get()
    changelist = reverse("admin:django_workflows_instance_changelist")
    change = reverse("admin:django_workflows_instance_change", args=[big.pk])
    api_list = reverse("django_workflows_api:instance-list", args=["bench-three"])
    api_big = reverse("django_workflows_api:instance-detail", args=[big.workflow_name, big.instance_id])

    def cli_list(*filters):
        return lambda: call_command("workflows", "instances", "list", "bench-three", *filters, stdout=io.StringIO())

    # A tenant holds a thousandth of the instances, a region a quarter, a customer one; a subject ten.
    tenant, region, customer = scale_load.tenant_of(some.pk), scale_load.region_of(some.pk), "customer-00000010"
    about = (Instance.objects.filter(workflow_name="bench-three", subject_id__isnull=False, pk__gte=some.pk)
             .order_by("pk").values_list("subject_id", flat=True).first())
    subject = f"{'.'.join(scale_load.SUBJECT_MODEL)}:{about}"

    # The loops run at the load's moment, however long ago it was (--reuse): the same instances are due.
    now = datetime.fromisoformat(loaded["loaded_at"])

    def purge_batch():
        due = retention.due_by_setting(retention.purge_cutoff(now))
        batch = retention.next_purge_batch(due)
        if batch:
            retention.delete_finished(batch, due)

    paths = [
        ("admin: instance list", _checked(admin, changelist), True),
        ("admin: counts per status", lambda: status_totals(), True),
        ("admin: counts per status of a workflow", lambda: status_totals("bench-three"), True),
        ("admin: list, status errored", _checked(admin, changelist, status__exact="errored"), True),
        ("admin: list, status complete", _checked(admin, changelist, status__exact="complete"), True),
        ("admin: list, status paused", _checked(admin, changelist, status__exact="paused"), True),
        ("admin: list, workflow bench-waiter", _checked(admin, changelist, workflow="bench-waiter"), True),
        ("admin: list, workflow and status", _checked(admin, changelist, workflow="bench-approval",
                                                      status__exact="waiting"), True),
        ("admin: list, version", _checked(admin, changelist, version="2026.11.1"), True),
        ("admin: search an instance id", _checked(admin, changelist, q=some.instance_id), True),
        ("admin: search an id's beginning", _checked(admin, changelist, q=some.instance_id[:-2]), True),
        ("admin: list, page 100", _checked(admin, changelist, p="100"), True),
        ("admin: instance of 10,000 steps", _checked(admin, change), True),
        ("admin: its last page of steps", _checked(admin, change, steps_page="200"), True),
        ("admin: approval queue", _checked(admin, reverse("admin:django_workflows_instance_approvals")), True),
        ("admin: workflows page", _checked(admin, reverse("admin:django_workflows_instance_workflows")), True),
        ("API: workflow detail", _checked(api, reverse("django_workflows_api:workflow-detail",
                                                       args=["bench-three"])), True),
        ("API: instance list", _checked(api, api_list), True),
        ("API: instance list, status errored", _checked(api, api_list, status="errored"), True),
        ("API: instance list, page 100", _checked(api, api_list, page="100"), True),
        ("API: instance of 10,000 steps", _checked(api, api_big), True),
        ("API: its last page of steps", _checked(api, api_big, steps_page="100"), True),
        ("admin: list, tag tenant", _checked(admin, changelist, tag=f"tenant={tenant}"), True),
        ("admin: list, tag region (a quarter)", _checked(admin, changelist, tag=f"region={region}"), True),
        ("admin: list, subject", _checked(admin, changelist, subject=subject), True),
        ("API: instance list, tag tenant", _checked(api, api_list, **{"tag.tenant": tenant}), True),
        ("API: instance list, tag region (a quarter)", _checked(api, api_list, **{"tag.region": region}), True),
        ("API: instance list, tenant and region", _checked(api, api_list, **{"tag.tenant": tenant,
                                                                               "tag.region": region}), True),
        ("API: instance list, tag customer (one)", _checked(api, api_list, **{"tag.customer": customer}), True),
        ("API: instance list, subject", _checked(api, api_list, subject=subject), True),
        ("CLI: workflows instances list", cli_list(), True),
        ("CLI: instances list --tag", cli_list("--tag", f"tenant={tenant}"), True),
        ("CLI: instances list --subject", cli_list("--subject", subject), True),
        ("wake-up: next_wake_time", dispatch.next_wake_time, False),
        ("wake-up: wake_due", _rolled_back(lambda: dispatch.wake_due(now)), False),
        ("sweeper: sweep", _rolled_back(lambda: dispatch.sweep(now)), False),
        ("retention: one batch", _rolled_back(purge_batch), False),
    ]
    results = []
    for name, call, goal in paths:
        results.append(time_path(name, call, repeat, GOAL_MS if goal else None))
    return results
