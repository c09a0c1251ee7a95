"""Keyed limits, priorities and queues, in-process: the claim, the hand-on, the sweeper, create().

The workflows are in tests/testapp/flow_control.py. A lease taken with ``leases.take`` under another
owner stands for a replay running on another worker.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_workflows import workflows
from django_workflows.shared import routing
from django_workflows.api.input_fields import PRIORITY_ERROR
from django_workflows.errors import InvalidParams
from django_workflows.models import Instance
from django_workflows.engine.replay import replay
from django_workflows.store import leases
from django_workflows.store.dispatch import sweep

ELSEWHERE = "another-host:1:1:1"


def _row(handle) -> Instance:
    return Instance.objects.get(pk=handle.pk)


def _hold(env, handle):
    claim = leases.take(handle.pk, ELSEWHERE, env.now, 60)
    assert claim is not None and claim.pk == handle.pk
    return claim


@pytest.fixture
def serving():
    """Serve only some queues in this process, as ``workflows_worker --queues`` does."""
    def serve(*queues):
        routing.serve(list(queues))
    yield serve
    routing.serve(None)


# -- keyed limits -------------------------------------------------------------------------------------

def test_a_keyed_concurrency_limit_holds_per_key_and_not_across_keys(workflows_env):
    a1, a2, b1 = (workflows.get("per-customer").create(params={"customer_id": c}) for c in ("a", "a", "b"))
    workflows_env.executor.reset()
    assert [_row(h).limit_key for h in (a1, a2, b1)] == ["a", "a", "b"]
    _hold(workflows_env, a1)
    assert replay(a2.pk) is False  # customer a is at its limit of one
    assert (_row(a2).status, _row(a2).epoch) == ("queued", 0)
    assert replay(b1.pk)  # customer b is not
    assert _row(b1).status == "complete"


def test_the_replay_that_frees_a_keys_slot_hands_it_to_the_next_of_that_key(workflows_env):
    a1, a2 = (workflows.get("per-customer").create(params={"customer_id": "a"}) for _ in range(2))
    workflows.get("per-customer").create(params={"customer_id": "b"})
    workflows_env.executor.reset()
    assert replay(a1.pk)  # runs to the end, then hands customer a's slot on, and only a's
    assert list(workflows_env.executor.queue) == [a2.pk]


def test_the_sweeper_hands_on_every_keys_free_slot(workflows_env):
    handles = [workflows.get("per-customer").create(params={"customer_id": c}) for c in ("a", "a", "b", "c")]
    workflows_env.executor.reset()
    _hold(workflows_env, handles[0])
    sweep()
    # a is busy; b and c are free.
    assert sorted(workflows_env.executor.queue) == sorted([handles[2].pk, handles[3].pk])


def test_keys_from_tags_and_from_a_callable(workflows_env):
    acme = [workflows.get("per-tenant").create(tags={"tenant": "acme"}) for _ in range(3)]
    globex = workflows.get("per-tenant").create(tags={"tenant": "globex"})
    assert {_row(h).limit_key for h in acme} == {"acme"} and _row(globex).limit_key == "globex"
    regional = workflows.get("per-region").create(params={"country": "fr"}, tags={"tier": "pro"})
    assert _row(regional).limit_key == "fr-pro"


def test_a_keyed_rate_limit_counts_the_starts_of_each_key(workflows_env):
    first, second = (workflows.get("per-tenant").create(tags={"tenant": "acme"}) for _ in range(2))
    other = workflows.get("per-tenant").create(tags={"tenant": "globex"})
    workflows_env.run_until_idle()
    assert [_row(h).status for h in (first, second, other)] == ["complete", "waiting", "complete"]
    assert "rate limit 1/minute of workflow 'per-tenant' for tags.tenant 'acme'" in _row(second).waiting_reason
    workflows_env.advance(timedelta(minutes=1))
    assert _row(second).status == "complete"


@pytest.mark.parametrize("params, tags, wrong", [
    ({}, None, "have no 'customer_id'"),
    ({"customer_id": ["a"]}, None, "came to ['a']"),
    ({"customer_id": ""}, None, "came to ''"),
    ({"customer_id": True}, None, "came to True"),
])
def test_params_without_a_usable_key_are_refused_and_create_nothing(workflows_env, params, tags, wrong):
    with pytest.raises(InvalidParams, match="limits its instances per") as refused:
        workflows.get("per-customer").create(id="no-key", params=params, tags=tags)
    assert wrong in str(refused.value)
    assert not Instance.objects.filter(instance_id="no-key").exists()


@pytest.mark.parametrize("params", [None, {}, {"region": "fr"}])
def test_a_key_callable_that_fails_on_the_params_is_refused_and_creates_nothing(workflows_env, params):
    """The key is the class's code run on the caller's params: when it raises on them (here
    ``params['country']`` of no params) the caller gave what the key needs in a shape it cannot read,
    which is the caller's error to fix, as a missing dotted path is, not a server error."""
    with pytest.raises(InvalidParams, match="limits its instances per region_of, which raised") as refused:
        workflows.get("per-region").create(id="no-region", params=params)
    assert ("KeyError: 'country'" if params is not None else "TypeError") in str(refused.value)
    assert not Instance.objects.filter(instance_id="no-region").exists()


def test_a_key_callable_whose_database_fails_fails_as_the_database_does(workflows_env):
    """A key that reads the database and finds it gone is no fault of the params: not InvalidParams."""
    from django.db import OperationalError

    from django_workflows import WorkflowEntrypoint
    from django_workflows.shared.definition import registry

    def lost(params, tags):
        raise OperationalError("server closed the connection unexpectedly")

    class KeyedByTheDatabase(WorkflowEntrypoint):
        name = "keyed-by-the-database"
        concurrency = {"limit": 1, "key": lost}

        def run(self, event, step):
            return 1

    try:
        with pytest.raises(OperationalError):
            workflows.get("keyed-by-the-database").create(id="no-database", params={"country": "fr"})
    finally:
        registry.unregister(KeyedByTheDatabase)
    assert not Instance.objects.filter(instance_id="no-database").exists()


def test_the_api_answers_a_failing_key_callable_with_400_and_the_reason(workflows_env, api):
    response = api.post("/workflows/per-region/instances/", {"instance_id": "no-region"}, format="json")
    assert response.status_code == 400, response.content
    assert "limits its instances per region_of" in response.json()["error"]["message"]
    assert not Instance.objects.filter(instance_id="no-region").exists()


# -- priorities -------------------------------------------------------------------------------------

def test_a_queued_instance_gives_way_to_one_of_higher_priority_and_is_queued_again(workflows_env):
    low = [workflows.get("errand").create() for _ in range(3)]
    high = workflows.get("errand").create(priority=9)
    workflows_env.executor.reset()
    assert replay(low[0].pk)
    assert _row(high).status == "complete" and _row(high).priority == 9
    assert _row(low[0]).status == "queued" and _row(low[0]).epoch == 0
    assert list(workflows_env.executor.queue) == [low[0].pk]  # its own replay, later
    # The high one's own delivery finds nothing to do; the low ones run on their own deliveries.
    assert replay(high.pk) is False
    assert all(replay(h.pk) for h in low[1:])
    workflows_env.run_until_idle()
    assert all(_row(h).status == "complete" for h in low)


def test_equal_priorities_run_each_delivery_s_own_instance(workflows_env):
    older, newer = workflows.get("errand").create(), workflows.get("errand").create()
    workflows_env.executor.reset()
    assert replay(newer.pk)
    assert (_row(newer).status, _row(older).status) == ("complete", "queued")
    assert list(workflows_env.executor.queue) == []


def test_the_class_gives_the_default_priority_and_create_overrides_it(workflows_env):
    assert _row(workflows.get("urgent").create()).priority == 7
    assert _row(workflows.get("urgent").create(priority=0)).priority == 0
    for wrong in (10, -1, "9", True, 2.5):
        with pytest.raises(InvalidParams, match="priority must be a whole number from 0"):
            workflows.get("urgent").create(id="wrong-priority", priority=wrong)
    assert not Instance.objects.filter(instance_id="wrong-priority").exists()


def _run_deliveries_in_order(env) -> None:
    """Each delivery in the order it was made, a millisecond apart, as one worker would take them."""
    while env.executor.queue:
        env.clock.advance(timedelta(milliseconds=1))
        replay(env.executor.queue.popleft())


def test_a_priority_9_instance_behind_500_queued_priority_0_ones_starts_first(workflows_env):
    backlog = []
    for _ in range(5):
        backlog += workflows.get("errand").create_batch([{} for _ in range(100)])
    urgent = workflows.get("errand").create(priority=9)
    _run_deliveries_in_order(workflows_env)
    started = dict(Instance.objects.filter(workflow_name="errand").values_list("pk", "started_at"))
    assert len(started) == 501 and None not in started.values()
    assert started[urgent.pk] < min(started[h.pk] for h in backlog)


@override_settings(DJANGO_WORKFLOWS={"PRIORITY_AGING_SECONDS": 1})
def test_a_low_priority_still_starts_under_a_steady_stream_of_high_ones(workflows_env):
    """A priority-9 instance arrives every second and a replay runs every second: the workers never
    catch up. Aging at a point a second, the low one's turn comes once the high ones created in the
    nine seconds after it are done."""
    low = workflows.get("errand").create(priority=0)
    rounds = 0
    while _row(low).status != "complete":
        rounds += 1
        assert rounds <= 60, "the low priority starved"
        workflows.get("errand").create(priority=9)
        workflows_env.clock.advance(timedelta(seconds=1))
        replay(workflows_env.executor.queue.popleft())
    started = _row(low).started_at
    # Not before its turn: every high one created in the nine seconds after it started before it.
    early = Instance.objects.filter(workflow_name="errand", priority=9, created_at__lt=_row(low).created_at
                                    + timedelta(seconds=9))
    assert early.count() == 9 and all(row.started_at < started for row in early)
    assert Instance.objects.filter(workflow_name="errand", priority=9, status="queued").exists()


# -- queues -----------------------------------------------------------------------------------------

def test_a_process_serving_other_queues_leaves_an_instance_untouched(workflows_env, serving):
    heavy = workflows.get("heavy-lifting").create()
    ordinary = workflows.get("errand").create()
    light = workflows.get("heavy-lifting").create(queue="default")
    workflows_env.executor.reset()
    assert (_row(heavy).queue, _row(ordinary).queue, _row(light).queue) == ("heavy", "default", "default")
    serving("heavy")
    assert replay(ordinary.pk) is False and replay(light.pk) is False
    assert [(_row(h).status, _row(h).epoch) for h in (ordinary, light)] == [("queued", 0), ("queued", 0)]
    assert replay(heavy.pk) and _row(heavy).status == "complete"
    # Its sweeper leaves the default queue's stale instances to the workers that serve it.
    workflows_env.clock.advance(timedelta(minutes=5))
    assert sweep() == 0 and list(workflows_env.executor.queue) == []
    serving("default")
    assert sweep() == 2


def test_a_high_priority_of_another_queue_is_not_taken_instead(workflows_env):
    ordinary = workflows.get("errand").create()
    workflows.get("heavy-lifting").create(priority=9)
    workflows_env.executor.reset()
    assert replay(ordinary.pk) and _row(ordinary).status == "complete"


def test_create_refuses_a_queue_the_project_does_not_have(workflows_env, settings):
    with pytest.raises(InvalidParams, match="queue 'reports' is not one of this project's queues"):
        workflows.get("errand").create(id="lost", queue="reports")
    with pytest.raises(InvalidParams, match="queue must be a queue name"):
        workflows.get("errand").create(id="lost", queue="no spaces")
    assert not Instance.objects.filter(instance_id="lost").exists()
    settings.DJANGO_WORKFLOWS = {"QUEUES": ["reports"]}
    assert _row(workflows.get("errand").create(queue="reports")).queue == "reports"


def test_create_batch_takes_a_priority_and_a_queue_per_item(workflows_env):
    first, second = workflows.get("errand").create_batch([{"priority": 3}, {"queue": "heavy"}])
    assert (_row(first).priority, _row(first).queue) == (3, "default")
    assert (_row(second).priority, _row(second).queue) == (0, "heavy")
    with pytest.raises(InvalidParams, match="priority"):
        workflows.get("errand").create_batch([{"id": "fine"}, {"id": "wrong", "priority": 11}])
    assert not Instance.objects.filter(instance_id="fine").exists()


# -- statements per claim ---------------------------------------------------------------------------

def _claim_statements(env, handle) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        claim = leases.take(handle.pk, "here:1:1:1", env.now, 60)
    assert claim is not None
    return [q["sql"] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]]


@pytest.mark.parametrize("name, create, most", [
    ("errand", {}, 1),  # no limit: one UPDATE, whatever the priorities around it
    ("errand", {"priority": 9}, 1),
    ("per-customer", {"params": {"customer_id": "a"}}, 4),  # a keyed concurrency limit
    ("per-tenant", {"tags": {"tenant": "acme"}}, 4),  # a keyed concurrency limit and a keyed rate limit
    ("per-region", {"params": {"country": "fr"}}, 4),  # keyed concurrency, a rate limit of the workflow
])
def test_a_claim_takes_at_most_four_statements(workflows_env, name, create, most):
    workflows.get("errand").create(priority=5)  # a higher priority queued alongside
    handle = workflows.get(name).create(**create)
    statements = _claim_statements(workflows_env, handle)
    assert len(statements) <= most, statements


# -- routing to django-q2 ---------------------------------------------------------------------------

def test_the_django_q2_executor_enqueues_each_replay_on_its_queue_s_list(db):
    from django_q.conf import Conf
    from django_q.models import OrmQ

    from django_workflows.executors.q2 import DjangoQExecutor

    ordinary = workflows.get("errand").create()
    heavy = workflows.get("heavy-lifting").create()
    OrmQ.objects.all().delete()
    DjangoQExecutor().enqueue_replays([ordinary.pk, heavy.pk])
    assert sorted(OrmQ.objects.values_list("key", flat=True)) == sorted([Conf.CLUSTER_NAME,
                                                                        f"{Conf.CLUSTER_NAME}.heavy"])


def test_a_worker_of_several_queues_takes_from_each_of_their_lists(db):
    from django_q.brokers.redis_broker import Redis
    from django_q.conf import Conf

    from django_workflows.executors import queue_broker
    from django_workflows.executors.redis_queues import RedisQueues
    from django_workflows.executors.broker import ORMBroker

    assert queue_broker.for_queues(("default",)) is None  # django-q2's own, as before queues
    broker = queue_broker.for_queues(("heavy", "default"))
    assert isinstance(broker, ORMBroker)
    assert broker.list_keys == [f"{Conf.CLUSTER_NAME}.heavy", Conf.CLUSTER_NAME]
    broker.enqueue("heavy-task")
    other = ORMBroker(list_key=Conf.CLUSTER_NAME)
    other.enqueue("default-task")
    ORMBroker(list_key="somebody-else").enqueue("not-ours")
    taken = [payload for _ in range(3) for _, payload in broker._claim()]  # as many claims as its batch needs
    assert sorted(taken) == ["default-task", "heavy-task"]
    redis = RedisQueues([f"{Conf.CLUSTER_NAME}.heavy", Conf.CLUSTER_NAME])
    assert redis.list_keys == [Redis(list_key=f"{Conf.CLUSTER_NAME}.heavy").list_key,
                               Redis(list_key=Conf.CLUSTER_NAME).list_key]


def test_a_worker_on_the_orm_broker_starts_without_the_redis_package(monkeypatch):
    # [q2] without [redis], as the tutorial installs it: the queues' broker must not need redis to load.
    import sys

    monkeypatch.setitem(sys.modules, "redis", None)  # an import of redis now fails, as when not installed
    for module in ("django_workflows.executors.queue_broker", "django_workflows.executors.redis_queues", "django_q.brokers.redis_broker"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    from django_workflows.executors import queue_broker

    assert queue_broker.for_queues(("default",)) is None


@pytest.fixture
def api(db, workflows_env):
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    user = User.objects.create_superuser("flow", password="x")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_the_api_creates_with_a_priority_and_a_queue_and_shows_them(api, workflows_env):
    response = api.post("/workflows/three-steps/instances/", {"instance_id": "urgent", "priority": 9,
                                                              "queue": "heavy"}, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["priority"], response.json()["queue"]) == (9, "heavy")
    assert Instance.objects.filter(instance_id="urgent").values_list("priority", "queue").get() == (9, "heavy")
    batch = api.post("/workflows/three-steps/instances/batch/", [{"instance_id": "in-batch", "priority": 3}],
                     format="json")
    assert batch.status_code == 201, batch.json()
    assert Instance.objects.get(instance_id="in-batch").priority == 3
    listed = api.get("/workflows/three-steps/instances/").json()["results"]
    assert {(row["id"], row["priority"], row["queue"]) for row in listed} >= {("urgent", 9, "heavy"),
                                                                              ("in-batch", 3, "default")}


# Each refusal names what the field takes: before priority and queue existed, the API refused both as
# unknown fields (400, naming the field), so a test that asked only for a 400 naming the field would pass
# on code without them.
@pytest.mark.parametrize("body, errors", [
    ({"priority": 10}, {"priority": [PRIORITY_ERROR]}),
    ({"priority": -1}, {"priority": [PRIORITY_ERROR]}),
    ({"priority": "high"}, {"priority": [PRIORITY_ERROR]}),
    ({"queue": 7}, {"queue": ["Not a valid string."]}),
])
def test_the_api_refuses_a_priority_or_queue_it_cannot_take_and_creates_nothing(api, workflows_env, body,
                                                                              errors):
    response = api.post("/workflows/three-steps/instances/", body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["fields"] == errors, response.json()
    assert "from 0 (the default) to 9" in PRIORITY_ERROR
    assert not Instance.objects.exists()


def test_the_api_refuses_a_queue_the_project_does_not_have_naming_its_queues(api, workflows_env):
    response = api.post("/workflows/three-steps/instances/", {"queue": "nowhere"}, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_params", error
    assert "queue 'nowhere' is not one of this project's queues (default, heavy)" in error["message"], error
    assert not Instance.objects.exists()
