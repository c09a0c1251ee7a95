"""The engine suite runs in two flavours: each of its tests runs with the workflows as written (``[sync]``)
and with their async twins, ``async def run`` awaiting every step (``[async]``, see tests/flavours.py).

A test of the suite that is about one flavour only, or runs no workflow at all, says so with
``@pytest.mark.one_flavour("why")`` and runs once, as written. In the async flavour, a test fails if it
never ran an ``async def run`` (it should be one_flavour, or its workflow has no twin), or if a step
call of an async run was not awaited (the transform missed one).
"""

from __future__ import annotations

import pytest

from tests.flavours import FLAVOURS, in_flavour

# The engine's own tests: journal, keys, retries, waits, rollbacks, guards; what run() does.
ENGINE_SUITE = frozenset({
    "test_bounds",
    "test_concurrent_steps",
    "test_continue_as_new",
    "test_deadlines",
    "test_do",
    "test_guards",
    "test_idempotency",
    "test_replay_properties",
    "test_restart_from",
    "test_rollbacks",
    "test_sdk_forms",
    "test_sleep_and_events",
    "test_typed_values",
    "test_result_types",
    "test_progress",
    "test_store_errors",
    "test_user_code",
})


def pytest_configure(config):
    config.addinivalue_line("markers", "one_flavour(reason): a test of the engine suite that runs once, as "
                                       "written, not with the async twins of its workflows as well")


def in_engine_suite(module) -> bool:
    return module is not None and module.__name__.rpartition(".")[2] in ENGINE_SUITE


def pytest_generate_tests(metafunc):
    if in_engine_suite(metafunc.module) and not metafunc.definition.get_closest_marker("one_flavour"):
        metafunc.parametrize("flavour", FLAVOURS, indirect=True)


@pytest.fixture(autouse=True)
def flavour(request):
    """``"sync"``, or ``"async"``: then ``workflows.get(name)`` and the replays use the async twins
    (tests/flavours.py, ``in_flavour``)."""
    yield from in_flavour(request)
