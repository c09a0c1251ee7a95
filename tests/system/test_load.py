"""Load: 5,000 events from concurrent threads through the API to 1,000 waiting instances."""

import json
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_workflows import workflows
from django_workflows.models import Event, Instance
from django_workflows.engine.replay import replay

pytestmark = pytest.mark.django_db(transaction=True)

INSTANCES, EVENTS_EACH, THREADS = 1000, 5, 8


def test_5000_concurrent_events_none_lost_no_500(live_server):
    token = Token.objects.create(user=User.objects.create_superuser("load", "l@example.com", "pw")).key
    handle = workflows.get("awaiter")
    ids = []
    for chunk in range(INSTANCES // 100):
        ids += [h.id for h in handle.create_batch([{"id": f"w{chunk}-{n}"} for n in range(100)])]
    for pk in Instance.objects.values_list("pk", flat=True):
        replay(pk)  # each now waits for "go"
    assert Instance.objects.filter(status="waiting").count() == INSTANCES

    # Every instance gets the same event five times: repeated events are kept, not dropped.
    work = [(instance_id, n) for n in range(EVENTS_EACH) for instance_id in ids]
    statuses: Counter = Counter()
    lock = threading.Lock()

    def send(chunk):
        for instance_id, n in chunk:
            request = urllib.request.Request(
                f"{live_server.url}/workflows/awaiter/instances/{instance_id}/events/go/",
                data=json.dumps({"same": "payload"}).encode(), method="POST",
                headers={"Authorization": f"Token {token}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    code = response.status
            except urllib.error.HTTPError as exc:
                code = exc.code
            with lock:
                statuses[code] += 1

    threads = [threading.Thread(target=send, args=(work[i::THREADS],)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(f"load: {sum(statuses.values())} events from {THREADS} threads: {dict(statuses)}")
    assert statuses == {202: INSTANCES * EVENTS_EACH}
    assert Event.objects.count() == INSTANCES * EVENTS_EACH
    per_instance = Counter(Event.objects.values_list("instance_id", flat=True))
    assert set(per_instance.values()) == {EVENTS_EACH}
    # Each instance was woken: queued for its replay.
    assert Instance.objects.filter(status="queued").count() == INSTANCES
