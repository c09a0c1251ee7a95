"""The conformance suite: one test per behaviour Cloudflare's documentation and Python SDK describe, each
running a workflow written as Cloudflare writes it, its import line aside
(``from django_workflows.cloudflare import ...``).

Like the engine suite (tests/integration/conftest.py), each test runs twice: with the workflows as written
(``[sync]``, ``def run``) and with their async twins (``[async]``, ``async def run`` awaiting every step,
as Cloudflare's own examples write it; tests/flavours.py). A test about one flavour says so with
``@pytest.mark.one_flavour("why")``.
"""

from __future__ import annotations

import pytest

from tests.flavours import FLAVOURS, in_flavour


def pytest_configure(config):
    config.addinivalue_line("markers", "one_flavour(reason): a test of the engine suite that runs once, as "
                                       "written, not with the async twins of its workflows as well")


def pytest_generate_tests(metafunc):
    if not metafunc.definition.get_closest_marker("one_flavour"):
        metafunc.parametrize("flavour", FLAVOURS, indirect=True)


@pytest.fixture(autouse=True)
def flavour(request):
    """``"sync"``, or ``"async"``: then ``workflows.get(name)`` and the replays use the async twins
    (tests/flavours.py, ``in_flavour``)."""
    yield from in_flavour(request)


@pytest.fixture
def run_to_end(workflows_env):
    """Create an instance of a workflow and run it until it settles, moving the clock through every
    sleep and retry delay; return its status."""
    from django_workflows import workflows

    def run(name, params=None, **create):
        instance = workflows.get(name).create(params=params, **create)
        workflows_env.run_until_idle()
        for _ in range(50):
            if instance.status()["status"] != "waiting":
                break
            workflows_env.advance("1 hour")
        return instance.status()

    return run
