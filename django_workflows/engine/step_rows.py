"""When a finished step's journal row is written: before any more of the workflow's code runs, or, when
``run()`` returns straight after the step, in the transaction that ends the instance.

A sync ``run()`` of three steps would otherwise cost five commits (three rows, the end, and the
instance's INSERT): the last step's row and the end are two commits only because the engine cannot tell,
as the step returns, that ``run()`` is about to return. So the row of a step journaled in a row of its own
is kept (``JournalWriter.insert_later``) as the step returns into ``run()``, and a profile function watches
the replay's thread (``sys.setprofile``, which the interpreter calls for every Python and C function
called, and for every frame returned from):

- the first function called, whatever it is (the next step call, a helper, a ``print``, the ``__exit__``
  of a ``with`` block, a method of the user's own class behind an operator), writes the row first, as the
  step's own write would have, before that function runs: no code of the workflow's runs while a finished
  step is unjournaled, so a crash or a freeze there costs what it always did (``guarantees.md``);
- ``run()`` returning (or raising) without calling anything leaves the row to the release, which writes it
  and the end in one transaction (``JournalWriter.release``).

What runs between the step and ``run()``'s return is then bytecode that calls nothing: storing and loading
names, building a tuple, list or dict, ``return``. That is the engine's own path from a step's body to its
row, no larger than it was. Where a profiler or a debugger has the profile function, the row is written at
once, as it was before.

The watch saves one commit a replay, the last step's, and costs every step it watches a few calls of the
profile function (about 2 µs): past ``WATCHED_STEPS`` steps in one replay, which have cost about what a
commit costs, the replay is a long one (a loop of steps), and each later row is written at once, as the
step's own write.
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType
from typing import Any

from django_workflows.store.journal import JournalWriter


# The steps of one replay whose rows are watched for: each costs the profile function's calls, and all of them
# together save at most one commit (the last step's). About 2 µs a step, against a commit of 30 to 40 µs on
# SQLite (synchronous=NORMAL) and 200 µs or more on a server that syncs its log at every commit.
WATCHED_STEPS = {"sqlite": 16}
WATCHED_STEPS_ELSEWHERE = 128


class StepRows:
    """The watch over one replay's kept row: armed as a step returns into ``run()`` with its row kept, and
    settled at the next step call (``settle``), which raises what writing it raised, or returns the step's
    key and the instance's status for the pause it may announce."""

    __slots__ = ("writer", "run_code", "written", "failure", "watches_left")

    def __init__(self, writer: JournalWriter):
        self.writer = writer
        self.watches_left = WATCHED_STEPS.get(writer.connection.vendor, WATCHED_STEPS_ELSEWHERE)
        # The code of the workflow's run(): its return ends the watch with the row still kept.
        self.run_code: CodeType | None = None
        self.written: tuple[str, str] | None = None
        self.failure: BaseException | None = None

    def watching(self) -> bool:
        """Whether the next step's row may be kept for the watch: while this replay has watches left, and
        has a run() to tell returning."""
        return self.watches_left > 0 and self.run_code is not None

    def arm(self) -> None:
        """Watch the thread for the workflow's next call, if a row is kept (only while ``watching()``); write
        the row now where another profile function is installed."""
        if not self.writer.keeps_row:
            return
        self.watches_left -= 1
        if sys.getprofile() is not None:
            self._write()
            return
        sys.setprofile(self._watch)

    def _watch(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            sys.setprofile(None)
            self._write()
        elif event == "return" and frame.f_code is self.run_code:
            sys.setprofile(None)

    def _write(self) -> None:
        # Called from the profile function, where an exception would land in whatever the workflow
        # was about to call: kept, and raised by the next step call (or the release) instead.
        try:
            self.written = self.writer.write_pending()
        except BaseException as exc:  # noqa: BLE001 - a Fenced or a StoreError, raised again at settle()
            self.failure = exc

    def disarm(self) -> None:
        """The replay is over: stop watching (a row still kept is dropped with its writer)."""
        if sys.getprofile() == self._watch:
            sys.setprofile(None)

    def settle(self) -> tuple[str, str] | None:
        """At a step call: write the row if it is still kept; raise what writing it raised; return
        ``(step key, instance status)`` of a row written since the last call, or None."""
        self.disarm()
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
        if self.writer.keeps_row:
            self._write()
            return self.settle()
        written, self.written = self.written, None
        return written
