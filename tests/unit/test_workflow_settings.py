"""The package's settings (``DJANGO_WORKFLOWS``) as the engine reads them: a setting read once is an
attribute, so the next read is a plain lookup (a journaled step reads several), and a changed setting is
read again."""

import pytest
from django.test import override_settings

from django_workflows.foundations.conf import DEFAULTS, WorkflowSettings, workflow_settings


def test_a_setting_read_once_is_read_as_an_attribute_after(monkeypatch):
    settings = WorkflowSettings()
    fallbacks = []
    fallback = WorkflowSettings.__getattr__

    def counting(self, name):
        fallbacks.append(name)
        return fallback(self, name)

    monkeypatch.setattr(WorkflowSettings, "__getattr__", counting)
    for _ in range(3):
        assert settings.LARGE_VALUE_THRESHOLD == DEFAULTS["LARGE_VALUE_THRESHOLD"]
    assert fallbacks == ["LARGE_VALUE_THRESHOLD"]
    assert vars(settings)["LARGE_VALUE_THRESHOLD"] == DEFAULTS["LARGE_VALUE_THRESHOLD"]


def test_a_changed_setting_is_read_again_and_its_default_comes_back():
    default = workflow_settings.LARGE_VALUE_THRESHOLD
    with override_settings(DJANGO_WORKFLOWS={"LARGE_VALUE_THRESHOLD": default + 1}):
        assert workflow_settings.LARGE_VALUE_THRESHOLD == default + 1
    assert workflow_settings.LARGE_VALUE_THRESHOLD == default
    workflow_settings.reload()
    assert "LARGE_VALUE_THRESHOLD" not in vars(workflow_settings)


def test_an_unknown_setting_is_refused_and_never_kept():
    settings = WorkflowSettings()
    with pytest.raises(AttributeError, match="NO_SUCH_SETTING"):
        settings.NO_SUCH_SETTING
    assert "NO_SUCH_SETTING" not in vars(settings)
