"""The ``workflows_env`` pytest fixture (registered through the ``pytest11`` entry point)."""

import pytest


@pytest.fixture
def workflows_env(db):
    """``run_workflows()`` as a fixture: a recording executor and a manual clock, with database access."""
    from django_workflows.testing import run_workflows

    with run_workflows() as env:
        yield env
