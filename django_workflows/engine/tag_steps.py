"""What ``step.set_tags`` does on the replay: tag the instance from ``run()``, once.

    step.set_tags(customer=order.customer_ref, stage="shipping")

Tags are what an instance is searched by (``django_workflows.tags``). A replay must set the same ones as
the run that first reached the call, or a filter would find the instance by whichever code replayed it
last: so each call is journaled, a marker row of kind ``tags`` keyed ``set_tags(<n>)`` (the n-th call of
this replay; a step's key always ends in ``-<count>``, so no step name can take it). A call whose marker
is in the journal sets nothing: the journal's tags were set when the marker was written, in the same
transaction, and they stay (the values run() passes now are not compared: tags derived from data that
changed since are not an error). A call on new ground writes its tags and its marker together.

A marker is not a step, as ``step.patched``'s is not: it takes no position among the steps and does not
count toward ``step_limit``. A value of None removes that tag. Tags set are kept through ``restart()``;
a replay after it sets them again where it reaches the call.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_workflows import clock
from django_workflows.models import StepKind, StepStatus
from django_workflows.engine.step_host import StepHost
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.store import tags as instance_tags
from django_workflows.store.journal_entries import Entry, engine_statements
from django_workflows.tags import validate_tags


def marker_key(call: int) -> str:
    return f"set_tags({call})"


class TagSteps:
    """The replay's side of ``step.set_tags``, given the host and the cursor."""

    __slots__ = ("host", "cursor", "calls", "deferred", "pending_markers")

    def __init__(self, host: StepHost, cursor: JournalCursor):
        self.host, self.cursor = host, cursor
        self.calls = 0
        # An async run() calls set_tags while its event loop runs, where no database call may run: its
        # markers are written once the loop is idle (async_run), as step.patched's are.
        self.deferred = False
        self.pending_markers: list[dict[str, Any]] = []

    def set_tags(self, tags: Any) -> None:
        checked = validate_tags(tags, "step.set_tags()", removable=True)
        self.host.check_step_call("set_tags")
        self.calls += 1
        key = marker_key(self.calls)
        if key in self.cursor.journal or not checked:
            return
        marker = {"key": key, "name": "set_tags", "kind": StepKind.TAGS, "status": StepStatus.SUCCEEDED,
                  "result": {"tags": checked, "after_steps": self.cursor.keys_taken}}
        if self.deferred:
            self.pending_markers.append(marker)
        else:
            self.write(marker)

    def write_pending_markers(self) -> None:
        while self.pending_markers:
            self.write(self.pending_markers.pop(0))

    def write(self, marker: dict[str, Any]) -> None:
        """The tags and their marker, in one transaction: a replay fenced out (its marker refused) sets
        no tags."""
        writer = self.host.writer
        now = clock.now()
        with engine_statements(), transaction.atomic(using=writer.alias):
            step_id, _ = writer.insert(started_at=now, ended_at=now, **marker)
            instance_tags.write(writer.instance_pk, marker["result"]["tags"])
        self.cursor.note(marker["key"], Entry(step_id, StepKind.TAGS, StepStatus.SUCCEEDED, [], marker["result"],
                                              None, None, now))
