"""The replay's collaborators are given what they need, never the instance: the instance's lease, its
claim and its row are the replay's and its endings' alone, so a step's collaborators cannot reach past the
journal into the instance (the cursor learns the instance's name with the journal it loads)."""

from __future__ import annotations

import inspect

import pytest

from django_workflows.engine.child_steps import ChildSteps
from django_workflows.engine.concurrent_steps import ConcurrentSteps
from django_workflows.engine.do_steps import DoSteps
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.engine.markers import MarkerWriter
from django_workflows.engine.patches import PatchSteps
from django_workflows.engine.progress_steps import ProgressSteps
from django_workflows.engine.rollbacks import UndoSteps
from django_workflows.engine.tag_steps import TagSteps
from django_workflows.engine.waits import WaitSteps

COLLABORATORS = [JournalCursor, MarkerWriter, UndoSteps, DoSteps, WaitSteps, ChildSteps, PatchSteps, TagSteps,
                 ProgressSteps, ConcurrentSteps]
# What of the instance a constructor could be handed: the instance itself, or a value read off it.
INSTANCE_PARAMETERS = {"instance", "claim", "terminating", "instance_pk", "epoch"}


@pytest.mark.parametrize("collaborator", COLLABORATORS, ids=lambda cls: cls.__name__)
def test_a_collaborator_is_built_without_the_instance(collaborator):
    parameters = inspect.signature(collaborator.__init__).parameters
    required = {name for name, parameter in parameters.items()
                if name != "self" and parameter.default is inspect.Parameter.empty}
    assert not required & INSTANCE_PARAMETERS


def test_the_cursor_names_the_instance_it_loaded():
    cursor = JournalCursor()
    cursor.load({}, "w/1")
    assert cursor.instance == "w/1"
    assert cursor.step_order() == []
