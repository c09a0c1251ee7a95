"""What ``step.progress`` does on the replay: report how far the instance has come, once.

    for number, batch in enumerate(batches, 1):
        step.do(f"import batch {number}", lambda: import_rows(batch))
        step.progress({"done": number, "total": len(batches)})

The value is for people and pages (the admin's instance page, the API's instance detail and its stream of
server-sent events, ``InstanceHandle.progress()``), not for run(): nothing reads it back into a replay.
Each call is journaled as a marker row of kind ``progress`` keyed ``progress(<n>)`` (the n-th call of this
replay; a step's key always ends in ``-<count>``, so no step name can take it), written by itself in
autocommit as soon as run() reaches it, so that a page sees it before the next step ends. A call whose
marker is in the journal writes nothing, so a replay never reports the same progress twice and never moves
it back; the value a replay passes there now is not compared (a value derived from a clock may differ).

A marker is not a step: it takes no position among the steps, so ``step.progress`` may be added to (or
removed from) a workflow with instances under way, and it does not count toward ``step_limit``. A restart
clears the markers with the steps after them, and a replay reports their progress again as it reaches them.
Each write is fenced by the replay's epoch, as a step's is: a replay that lost its lease reports nothing.
On PostgreSQL the row's insert notifies ``changes.INSTANCE_CHANNEL`` (migration 0022), which wakes a stream
of the instance's progress at once.
"""

from __future__ import annotations

from typing import Any

from django_workflows import clock
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.engine.step_host import StepHost
from django_workflows.errors import InvalidStepInput
from django_workflows.models import StepKind, StepStatus
from django_workflows.serialization import NotJournalable, dump
from django_workflows.store.journal_entries import Entry

MAX_PROGRESS_SIZE = 4096
"""Bytes of JSON a progress value may take: a fraction, a count, a short message; not a result."""


def marker_key(call: int) -> str:
    return f"progress({call})"


class ProgressSteps:
    """The replay's side of ``step.progress``, given the host and the cursor."""

    __slots__ = ("host", "cursor", "calls", "deferred", "pending_markers")

    def __init__(self, host: StepHost, cursor: JournalCursor):
        self.host, self.cursor = host, cursor
        self.calls = 0
        # An async run() reports progress while its event loop runs, where no database call may run: its
        # markers are written once the loop is idle (async_run), as step.patched's and set_tags's are.
        self.deferred = False
        self.pending_markers: list[dict[str, Any]] = []

    def progress(self, value: Any) -> None:
        try:
            _, stored = dump(value, MAX_PROGRESS_SIZE)
        except NotJournalable as exc:
            raise InvalidStepInput(f"step.progress(): the value {exc}; report a small JSON value, such as "
                                   "0.4 or {'done': 4, 'total': 10}") from None
        self.host.check_step_call("progress")
        self.calls += 1
        key = marker_key(self.calls)
        if key in self.cursor.journal:
            return
        marker = {"key": key, "name": "progress", "kind": StepKind.PROGRESS, "status": StepStatus.SUCCEEDED,
                  "result": {"value": stored, "after_steps": self.cursor.keys_taken}}
        if self.deferred:
            self.pending_markers.append(marker)
        else:
            self.write(marker)

    def write_pending_markers(self) -> None:
        while self.pending_markers:
            self.write(self.pending_markers.pop(0))

    def write(self, marker: dict[str, Any]) -> None:
        now = clock.now()
        # A marker is not a step: a pause asked meanwhile is taken at the next step, not here.
        step_id, _ = self.host.writer.insert(started_at=now, ended_at=now, **marker)
        self.cursor.note(marker["key"], Entry(step_id, StepKind.PROGRESS, StepStatus.SUCCEEDED, [],
                                              marker["result"], None, None, now))
