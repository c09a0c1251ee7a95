"""Which tasks framework this Django has, for the tasks executor (``executors.tasks``) and the task it
enqueues (``executors.replay_task``): both take it from here, so neither imports the other to learn it."""

from __future__ import annotations

import importlib
import importlib.util

from django_workflows.errors import require_extra

PART = "The tasks executor (DJANGO_WORKFLOWS['EXECUTOR'])"


def tasks_framework():
    """The tasks framework of this Django: built in from Django 6 (``django.tasks``), the django-tasks
    backport (``django_tasks``) before it. django-tasks-db makes the same choice, so its backend and
    this executor's task belong to one framework."""
    if importlib.util.find_spec("django.tasks") is not None:
        return importlib.import_module("django.tasks")
    require_extra("django_tasks", "tasks", PART)
    return importlib.import_module("django_tasks")


def framework_class(framework, path: str):
    """A class of the tasks framework in use, by its path inside the framework's package."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"{framework.__name__}.{module}"), name)
