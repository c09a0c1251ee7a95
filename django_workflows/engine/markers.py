"""The marker rows a replay journals beside its steps: ``step.patched``'s, ``set_tags``'s and ``progress``'s.

A marker is not a step: it takes no position among the steps and does not count toward ``step_limit``. Each
kind decides whether a call writes one (``patches``, ``tag_steps``, ``progress_steps``); this writes it, one
way for all three: fenced by the replay's epoch, noted in the cursor for the lookups after it, and, while an
async run()'s event loop runs (where no database call may run), kept until the loop is idle (``async_run``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from django_workflows.shared import clock
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.engine.step_host import StepHost
from django_workflows.models import StepStatus
from django_workflows.store.journal_entries import Entry, engine_statements

# What a marker writes beside its row, in the row's transaction, given the instance's primary key (the
# tags a set_tags marker sets): a replay fenced out, its row refused, writes none of it.
AlsoWrite = Callable[[int], None]


class MarkerWriter:
    """Writes a replay's markers, given the host (its journal's writer) and the cursor."""

    __slots__ = ("host", "cursor", "deferred", "pending")

    def __init__(self, host: StepHost, cursor: JournalCursor):
        self.host, self.cursor = host, cursor
        self.deferred = False
        self.pending: list[tuple[dict[str, Any], AlsoWrite | None]] = []

    def mark(self, key: str, name: str, kind: str, result: dict[str, Any], *, config: dict[str, Any] | None = None,
             also: AlsoWrite | None = None) -> None:
        """Journal the marker ``key``, its result noting how many steps run() had called (``after_steps``):
        now, or once the event loop is idle if deferred."""
        marker = {"key": key, "name": name, "kind": kind, "status": StepStatus.SUCCEEDED,
                  "result": {**result, "after_steps": self.cursor.keys_taken}, "config": config}
        if self.deferred:
            self.pending.append((marker, also))
        else:
            self.write(marker, also)

    def write_pending(self) -> None:
        """Write the markers kept while deferred, in the order asked."""
        while self.pending:
            self.write(*self.pending.pop(0))

    def write(self, marker: dict[str, Any], also: AlsoWrite | None) -> None:
        # A marker is not a step: a pause asked meanwhile is taken at the next step, not here.
        writer, now = self.host.writer, clock.now()
        if also is None:
            step_id, _ = writer.insert(started_at=now, ended_at=now, **marker)
        else:
            with engine_statements(), transaction.atomic(using=writer.alias):
                step_id, _ = writer.insert(started_at=now, ended_at=now, **marker)
                also(writer.instance_pk)
        self.cursor.note(marker["key"], Entry(step_id, marker["kind"], StepStatus.SUCCEEDED, [], marker["result"],
                                              None, None, now))


class CountedMarkers:
    """A step method whose every call is journaled as a marker keyed ``<name>(<n>)``, the n-th call of the
    replay (``set_tags``, ``progress``; a step's key always ends in ``-<count>``, so no step name can take
    it). A call whose marker is in the journal writes nothing: a replay writes each once."""

    name = ""
    __slots__ = ("host", "markers", "calls")

    def __init__(self, host: StepHost, markers: MarkerWriter):
        self.host, self.markers = host, markers
        self.calls = 0

    def next_key(self) -> str | None:
        """Count a call: the key of the marker it writes, or None where the journal has it already."""
        self.host.check_step_call(self.name)
        self.calls += 1
        key = f"{self.name}({self.calls})"
        return None if key in self.markers.cursor.journal else key
