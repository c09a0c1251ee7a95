"""Modules that moved stay importable by their old paths, for the queued tasks and journaled errors that
name them: the same module object, with a DeprecationWarning that says where it went."""

import importlib
import sys

import pytest

from django_workflows.shared.error_journal import rebuild_error
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


def test_a_path_by_an_old_module_is_read_as_today_s():
    from django_workflows.moved_modules import current

    assert current("django_workflows.tasks.run_replay") == "django_workflows.engine.replay_tasks.run_replay"
    assert current("django_workflows.replay") == "django_workflows.engine.replay"
    # A module whose name an old one begins with is not that module.
    assert current("django_workflows.replay_costs_x") == "django_workflows.replay_costs_x"
    assert current("django_workflows.models.Instance") == "django_workflows.models.Instance"


@pytest.mark.parametrize("module", __import__("django_workflows").PUBLIC_MODULES)
def test_a_public_module_imports_without_a_warning(module):
    # Under the suite's warnings-as-errors, a DeprecationWarning would fail the import.
    assert importlib.import_module(module).__name__ == module
