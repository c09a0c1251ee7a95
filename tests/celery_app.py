"""The test suite's Celery apps, configured from Django's settings (``CELERY_*`` in tests/settings.py) as a
project's ``celery.py`` is, one per broker: ``redis_app`` (Redis, database ``TEST_REDIS_DB``),
``rabbitmq_app`` (RabbitMQ, ``TEST_RABBITMQ_URL``), ``memory_app`` (kombu's in-process transport, for the
integration tier, which reads the messages back itself) and ``unreachable_app`` (a broker nobody listens
on). A real worker runs one of them:

    celery -A tests.celery_app:redis_app worker --queues workflows
"""

from __future__ import annotations

import os

from celery import Celery

# Set before the apps are made: Celery then sets Django up in its worker (its Django fix-up), and the
# worker closes the database connections a pool process inherits and each task leaves behind.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

REDIS_URL = f"redis://127.0.0.1:6379/{int(os.environ.get('TEST_REDIS_DB', '5'))}"
RABBITMQ_URL = os.environ.get("TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def make_app(name: str, broker_url: str) -> Celery:
    app = Celery(name, broker=broker_url)  # the broker given here takes precedence over the settings'
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


redis_app = make_app("tests-redis", REDIS_URL)
rabbitmq_app = make_app("tests-rabbitmq", RABBITMQ_URL)
memory_app = make_app("tests-memory", "memory://")
unreachable_app = make_app("tests-unreachable", "redis://127.0.0.1:1/0")
