"""The django-q2 broker of a worker that serves several queues (``workflows_worker --queues``).

Each queue's replays go to a django-q2 list of their own (``executors.q2_conf.list_key``), so that a
worker is handed only the replays of the queues it serves: another worker's never reach it, and it
never takes, then drops, an instance it may not run. A worker serving one queue takes from that list
with the configured broker; one serving several takes from all of their lists through one broker: the
ORM broker of ``django_workflows.executors.broker`` in one statement over every list, django-q2's Redis broker
with one BLPOP over every list.
"""

from __future__ import annotations

from django_workflows.errors import WorkflowConfigError, require_extra
from django_workflows.executors import q2_conf

require_extra("django_q", "q2", "The broker of a worker serving queues (django_workflows.executors.queue_broker)")

from django_q.brokers import Broker, get_broker  # noqa: E402

# django-q2's Redis broker, by where it is defined: imported only when a worker uses it, since it needs
# the redis package, which a project on the ORM broker does not install ([q2] without [redis]).
REDIS_BROKER = ("django_q.brokers.redis_broker", "Redis")


def for_queues(queues: tuple[str, ...]) -> Broker | None:
    """The broker a cluster serving ``queues`` takes its tasks from; None for django-q2's own (the
    default queue alone, as every worker before queues)."""
    from django_workflows.executors.broker import ORMBroker

    keys = [q2_conf.list_key(queue) for queue in queues]
    if keys == [q2_conf.list_key("default")]:
        return None
    broker = get_broker(keys[0])
    if len(keys) == 1:
        return broker
    if isinstance(broker, ORMBroker):
        broker.list_keys = keys
        return broker
    if (type(broker).__module__, type(broker).__name__) == REDIS_BROKER:
        from django_workflows.executors.redis_queues import RedisQueues

        return RedisQueues(keys)
    raise WorkflowConfigError(
        f"One worker serves several queues ({', '.join(queues)}) with django_workflows' ORM broker "
        f"({q2_conf.ORM_BROKER}) or django-q2's Redis broker, not {type(broker).__name__}: switch broker, "
        "or start one worker per queue (--queues heavy, --queues default).")
