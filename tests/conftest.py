from django.conf import settings


def pytest_collection_modifyitems(config, items):
    """Tests marked ``postgres`` run only in the PostgreSQL pass; the SQLite pass deselects them."""
    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
        return
    selected = [item for item in items if not item.get_closest_marker("postgres")]
    deselected = [item for item in items if item.get_closest_marker("postgres")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_calls():
    from tests.testapp.workflows import calls

    calls.clear()
    yield
    calls.clear()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
