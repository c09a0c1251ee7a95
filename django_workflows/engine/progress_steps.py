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

from django_workflows.engine.markers import CountedMarkers
from django_workflows.errors import InvalidStepInput
from django_workflows.models import StepKind
from django_workflows.shared.serialization import NotJournalable, dump

MAX_PROGRESS_SIZE = 4096
"""Bytes of JSON a progress value may take: a fraction, a count, a short message; not a result."""


class ProgressSteps(CountedMarkers):
    """The replay's side of ``step.progress``, given the host and the replay's marker writer."""

    name = "progress"
    __slots__ = ()

    def progress(self, value: Any) -> None:
        try:
            _, stored = dump(value, MAX_PROGRESS_SIZE)
        except NotJournalable as exc:
            raise InvalidStepInput(f"step.progress(): the value {exc}; report a small JSON value, such as "
                                   "0.4 or {'done': 4, 'total': 10}") from None
        key = self.next_key()
        if key is not None:
            self.markers.mark(key, "progress", StepKind.PROGRESS, {"value": stored})
