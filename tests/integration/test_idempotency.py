"""Idempotent deliveries: an event sent again under its Idempotency-Key is stored once, and a broker
that fails after the commit never turns a stored event into an error for its sender."""

from __future__ import annotations

import json
import random
import threading
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_workflows import workflows
from django_workflows.shared import clock
from django_workflows.foundations.conf import workflow_settings
from django_workflows.errors import IdempotencyKeyReused
from django_workflows.models import Event, Instance
from django_workflows.store import dispatch
from django_workflows.webhooks import sign

SECRET = "whsec-idem"


@pytest.fixture
def waiting(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {"WEBHOOK_SECRETS": {"awaiter": SECRET}}
    handle = workflows.get("awaiter").create(id="a1")
    workflows_env.run_until_idle()
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    return handle, client


def post_event(client, payload, key, event_type="go", instance="a1"):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(f"/workflows/awaiter/instances/{instance}/events/{event_type}/", payload, format="json",
                       **headers)


def test_a_repeat_with_the_same_body_answers_as_the_first_and_stores_nothing(waiting, workflows_env):
    _, client = waiting
    first = post_event(client, {"n": 1}, "key-1")
    assert first.status_code == 202, first.content
    workflows_env.run_until_idle()  # the event finishes the instance: a repeat still gets its answer
    again = post_event(client, {"n": 1}, "key-1")
    assert again.status_code == 202, again.content
    assert again.json()["event_id"] == first.json()["event_id"]
    assert Event.objects.count() == 1


@pytest.mark.parametrize(("payload", "event_type"), [({"n": 2}, "go"), ({"n": 1}, "other")])
def test_a_repeat_with_another_body_or_type_is_a_409_and_stores_nothing(waiting, payload, event_type):
    _, client = waiting
    assert post_event(client, {"n": 1}, "key-1").status_code == 202
    response = post_event(client, payload, "key-1", event_type=event_type)
    assert response.status_code == 409, response.content
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Event.objects.count() == 1


def test_keys_are_per_instance_and_events_without_a_key_are_each_kept(waiting, workflows_env):
    handle, client = waiting
    workflows.get("awaiter").create(id="a2")
    workflows_env.run_until_idle()
    assert post_event(client, {"n": 1}, "shared").status_code == 202
    assert post_event(client, {"n": 1}, "shared", instance="a2").status_code == 202
    assert post_event(client, {"n": 1}, None).status_code == 202
    assert post_event(client, {"n": 1}, None).status_code == 202
    assert Event.objects.count() == 4


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there"])
def test_a_malformed_key_is_a_400(waiting, key):
    _, client = waiting
    response = post_event(client, {"n": 1}, key)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_idempotency_key"
    assert Event.objects.count() == 0


def test_python_callers_get_the_same_event_id_and_the_same_refusal(waiting):
    handle, _ = waiting
    first = handle.send_event("go", {"n": 1}, idempotency_key="k")
    assert handle.send_event("go", {"n": 1}, idempotency_key="k") == first
    with pytest.raises(IdempotencyKeyReused, match="Idempotency key 'k' was used for another event"):
        handle.send_event("go", {"n": 9}, idempotency_key="k")
    assert Event.objects.count() == 1


def test_a_provider_retry_signed_anew_is_stored_once_and_the_key_cannot_be_swapped(waiting):
    body = b'{"paid": true}'

    def deliver(key, signed_key, timestamp):
        return APIClient().post("/workflows/awaiter/instances/a1/webhooks/go/", body,
                                content_type="application/json", HTTP_IDEMPOTENCY_KEY=key,
                                HTTP_X_WORKFLOWS_SIGNATURE=sign(SECRET, body, timestamp=timestamp,
                                                                idempotency_key=signed_key))

    import time

    now = int(time.time())
    first = deliver("evt_1", "evt_1", now - 30)
    retry = deliver("evt_1", "evt_1", now)  # the provider's retry: signed again, a new signature
    assert first.status_code == retry.status_code == 202, retry.content
    assert first.json()["event_id"] == retry.json()["event_id"]
    # A captured request replayed under another key does not match its signature.
    swapped = deliver("evt_2", "evt_1", now)
    assert swapped.status_code == 401, swapped.content
    assert Event.objects.count() == 1


# -- a broker that fails after the commit --------------------------------------------------------

@pytest.mark.one_flavour("about the broker and the sweeper after an event's commit (seconds of Redis timeouts): "
                         "run() only reaches its wait, as in the tests above, which run in both flavours")
@pytest.mark.django_db(transaction=True)
def test_a_broker_push_that_fails_after_the_commit_is_recovered_by_the_sweeper(settings, monkeypatch):
    """Redis refuses the replay's task (nothing listens on its port): the sender still gets its 202,
    the event is stored once, and the sweeper queues the instance's replay again."""
    from django_q.conf import Conf

    from django_workflows import executors
    from django_workflows.engine.replay import replay

    handle = workflows.get("awaiter").create(id="b1")
    replay(handle.pk)
    assert Instance.objects.get(pk=handle.pk).status == "waiting"
    unreachable = {"host": "127.0.0.1", "port": 1, "db": 0, "socket_connect_timeout": 1}
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "BROKER_CLASS", None)
    monkeypatch.setattr(Conf, "REDIS", unreachable)
    settings.Q_CLUSTER = {**{k: v for k, v in settings.Q_CLUSTER.items() if k not in ("orm", "broker_class")},
                          "redis": unreachable}
    settings.DJANGO_WORKFLOWS = {"EXECUTOR": "django_workflows.executors.q2.DjangoQExecutor"}
    executors.reset()
    client = APIClient()
    client.force_authenticate(User.objects.create_superuser("admin", "a@example.com", "pw"))
    try:
        response = post_event(client, {"n": 1}, "only-once", instance="b1")
        assert response.status_code == 202, response.content
        assert Event.objects.count() == 1
        assert Instance.objects.get(pk=handle.pk).status == "queued"
        # The sweeper finds it queued without a replay, and queues it again (through the broker of the
        # moment: here, once Redis is back).
        pushed: list[int] = []
        monkeypatch.setattr(executors.get_executor(), "enqueue_replay", pushed.append)
        later = clock.now() + timedelta(seconds=workflow_settings.REDISPATCH_SECONDS + 1)
        assert dispatch.sweep(later) == 1
        assert pushed == [handle.pk]
    finally:
        executors.reset()


# -- through the real server ------------------------------------------------------------------------

@pytest.mark.one_flavour("posts events through a live server to instances no replay runs here")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_1000_concurrent_posts_of_100_keys_store_100_events(live_server):
    token = Token.objects.create(user=User.objects.create_superuser("idem", "i@example.com", "pw")).key
    handle = workflows.get("awaiter")
    ids = [h.id for h in handle.create_batch([{"id": f"w{n}"} for n in range(20)])]
    posts = [(ids[key % 20], f"key-{key}") for key in range(100) for _ in range(10)]
    random.Random(7).shuffle(posts)
    answers: dict[str, set] = defaultdict(set)
    statuses: Counter = Counter()
    lock = threading.Lock()

    def send(chunk):
        for instance_id, key in chunk:
            request = urllib.request.Request(
                f"{live_server.url}/workflows/awaiter/instances/{instance_id}/events/go/",
                data=json.dumps({"key": key}).encode(), method="POST",
                headers={"Authorization": f"Token {token}", "Content-Type": "application/json",
                         "Idempotency-Key": key})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    code, body = response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                code, body = exc.code, json.loads(exc.read() or b"{}")
            with lock:
                statuses[code] += 1
                answers[key].add(body.get("event_id"))

    threads = [threading.Thread(target=send, args=(posts[i::16],)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == {202: 1000}, statuses
    assert Event.objects.count() == 100
    assert all(len(event_ids) == 1 for event_ids in answers.values()), answers
    assert {next(iter(event_ids)) for event_ids in answers.values()} == set(Event.objects.values_list("id", flat=True))
