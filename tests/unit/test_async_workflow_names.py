"""The names of the async workflows, which every take on PostgreSQL binds: read off the registry once, and
again only when a class is registered or unregistered."""

from django_workflows import WorkflowEntrypoint
from django_workflows.shared.definition import registry
from django_workflows.store import journal_entries


def test_the_async_names_are_read_once_until_the_registry_changes(monkeypatch):
    journal_entries.async_workflows()
    reads = []
    all_classes = registry.all
    monkeypatch.setattr(registry, "all", lambda: reads.append(1) or all_classes())
    first = journal_entries.async_workflows()
    assert journal_entries.async_workflows() == first
    assert reads == []

    class LateAsync(WorkflowEntrypoint):
        name = "late-async-names"

        async def run(self, event, step):
            return None

    try:
        assert "late-async-names" in journal_entries.async_workflows()
        assert len(reads) == 1
    finally:
        registry.unregister(LateAsync)
    assert "late-async-names" not in journal_entries.async_workflows()
    assert len(reads) == 2
