"""The benchmarks' Celery app, configured from ``benchmarks.settings`` (``CELERY_*``) as a project's
``celery.py`` is: ``celery -A benchmarks.celery_app worker`` runs the replays of the Celery executor."""

from __future__ import annotations

import os

from celery import Celery

# Before the app is made: Celery then sets Django up in its worker and looks after the pool processes'
# database connections.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

app = Celery("bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
