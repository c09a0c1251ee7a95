"""Modules that moved stay importable by their old paths, for the queued tasks and journaled errors that
name them: the same module object, with a DeprecationWarning that says where it went."""

import importlib
import sys

import pytest

from django_workflows.error_journal import rebuild_error
from django_workflows.moved_modules import MOVED_MODULES


@pytest.mark.parametrize("old, new", sorted(MOVED_MODULES.items()))
def test_an_old_module_path_imports_the_module_at_its_new_one(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_a_task_queued_by_the_old_path_finds_its_function():
    # django-q2 keeps the dotted path of a queued task's function: a replay queued before the upgrade.
    from pydoc import locate

    sys.modules.pop("django_workflows.tasks", None)
    with pytest.warns(DeprecationWarning):
        function = locate("django_workflows.tasks.run_replay")
    from django_workflows.engine.replay_tasks import run_replay

    assert function is run_replay


def test_a_journaled_error_class_under_an_old_module_path_is_rebuilt_from_its_new_one():
    from django_workflows.engine.child_steps import ChildIdTaken

    error = rebuild_error({"name": "ChildIdTaken", "message": "taken",
                           "type": "django_workflows.children:ChildIdTaken"})
    assert type(error) is ChildIdTaken and str(error) == "taken"


def test_nothing_remains_at_an_old_path_on_disk():
    import django_workflows

    root = django_workflows.__path__[0]
    import os

    for old in MOVED_MODULES:
        assert not os.path.exists(os.path.join(root, *old.split(".")[1:]) + ".py"), old
