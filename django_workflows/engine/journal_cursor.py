"""Where a replay stands in its instance's journal: the rules that make a replay deterministic.

A step's key is its name and how many times run() has called that name so far in this replay
(``charge-1``, ``charge-2``), so a loop that reuses a name gets a row per turn. The n-th step run()
calls must be the n-th step journaled, and of the same kind: otherwise the code changed under the
instance (a step renamed, removed, inserted or reordered), which is a ``NonDeterminismError``. A step
is looked up once per replay, where run() first reaches it, which is what its position is measured
from. The markers of ``step.patched`` and ``step.set_tags`` are rows of the journal but not steps: they
take no position.

The cursor only reads what it is given and counts: it runs no query and writes nothing, so these rules
are tested on their own (``tests/unit/test_journal_cursor.py``). The replay turns the errors it raises
into the instance's (``StepHost.fail``).
"""

from __future__ import annotations

from django_workflows.foundations.conf import HARD_STEP_LIMIT
from django_workflows.errors import NonDeterminismError, StepLimitExceeded
from django_workflows.models import MARKER_KINDS
from django_workflows.store.journal import Entry


class JournalCursor:
    """A replay's position in the journal it loaded: the keys taken, the steps looked up and counted."""

    __slots__ = ("instance", "journal", "step_limit", "occurrences", "keys_taken", "steps_called",
                 "steps_taken", "examined", "_order")

    def __init__(self, journal: dict[str, Entry] | None = None, step_limit: int = HARD_STEP_LIMIT, instance: str = ""):
        # The instance as its errors name it ("workflow/id"), given with the journal it loads (``load``).
        self.instance = instance
        self.journal: dict[str, Entry] = {} if journal is None else journal
        self.step_limit = step_limit
        # How many times run() has called each step name.
        self.occurrences: dict[str, int] = {}
        # Step keys run() has taken (an async run() takes them as it calls its steps, before they are
        # looked up): where a step.patched stands among the steps.
        self.keys_taken = 0
        # How many steps this replay has looked up: the n-th looked up must be the n-th journaled.
        self.steps_called = 0
        # step.do calls counted toward the step limit.
        self.steps_taken = 0
        # Each step's journal entry (or None), by key, from where run() first reached it.
        self.examined: dict[str, Entry | None] = {}
        self._order: list[str] | None = None

    def load(self, journal: dict[str, Entry], instance: str) -> None:
        """Stand at the start of ``journal``, the journal of ``instance`` ("workflow/id")."""
        self.journal, self.instance, self._order = journal, instance, None

    def take_key(self, name: str) -> str:
        """The key of the next call of the step ``name``."""
        count = self.occurrences.get(name, 0) + 1
        self.occurrences[name] = count
        self.keys_taken += 1
        return f"{name}-{count}"

    def examine(self, key: str, kind: str) -> Entry | None:
        """The journal's entry for ``key`` (None if it has none), reached as a step of ``kind``. Raises
        ``NonDeterminismError`` if the journal has another step at this position, or this one as
        another kind. Looked up once: an async run() may look at a step its event loop has not finished
        with in several rounds, and position counts the first."""
        if key in self.examined:
            return self.examined[key]
        entry = self.examined[key] = self._first_look(key, kind)
        return entry

    def _first_look(self, key: str, kind: str) -> Entry | None:
        position = self.steps_called
        self.steps_called += 1
        if self.journal:
            order = self.step_order()
            if position < len(order) and order[position] != key:
                expected = order[position]
                raise NonDeterminismError(
                    f"Instance {self.instance}: step {position + 1} of run() is {key!r}, but the journal has "
                    f"{expected!r} there (a step renamed, removed, inserted or reordered since the instance "
                    "began). run() must call the journaled steps in the same order on every replay; new steps "
                    "may only follow them. Deploy the change as a workflow of another name, or restart() the "
                    "instance to run it from the top under the new code.",
                    step=key, expected_step=expected, position=position + 1,
                )
        entry = self.journal.get(key)
        if entry is not None and entry.kind != kind:
            raise NonDeterminismError(
                f"Step {key!r} of instance {self.instance}: the journal has it as a {entry.kind} step, "
                f"but this replay reached it as a {kind} step. run() must call the same steps in the same "
                "order on every replay; to change a workflow's shape, give the new version another name "
                "or restart the instance.",
                step=key, journaled_kind=entry.kind, replayed_kind=kind,
            )
        return entry

    def count_step(self, key: str, journaled: bool) -> None:
        """Count a ``step.do`` toward the step limit; a new one past it raises ``StepLimitExceeded`` (a
        journaled one replays, whatever the limit is now)."""
        self.steps_taken += 1
        if self.steps_taken > self.step_limit and not journaled:
            raise StepLimitExceeded(
                f"Instance {self.instance} reached the step limit of {self.step_limit} steps "
                "(step.do; sleeps and waits for events do not count) at step "
                f"{key!r}. Set step_limit on the workflow class (at most {HARD_STEP_LIMIT}) "
                "or split the work across instances.",
                step=key, limit=self.step_limit,
            )

    def step_order(self) -> list[str]:
        """The journal's step keys in the order they were first written, markers left out."""
        if self._order is None:
            # Rows are written in the order run() called the steps, and ids grow with each write.
            self._order = [key for key, entry in sorted(self.journal.items(), key=lambda item: item[1].id)
                           if entry.kind not in MARKER_KINDS]
        return self._order

    def patch_answer(self, key: str, change_id: str) -> bool | None:
        """What the journal answers for ``step.patched(change_id)`` reached now: True if its marker is
        there, False if the journal has steps beyond this point (the instance passed it on the code
        before the patch), None if run() is on new ground and the marker is to be written. A marker
        reached after another number of steps than it records raises ``NonDeterminismError``."""
        position = self.keys_taken
        entry = self.journal.get(key)
        if entry is None:
            return False if position < len(self.step_order()) else None
        recorded = entry.result.get("after_steps") if isinstance(entry.result, dict) else None
        if recorded is not None and recorded != position:
            raise NonDeterminismError(
                f"Instance {self.instance}: step.patched({change_id!r}) was reached after {position} "
                f"steps, but the journal recorded it after {recorded} (the call moved among the steps "
                "since the instance took the patch). Keep step.patched where it was when the patch was "
                "deployed; move the code it guards instead.",
                step=key, position=position, journaled_position=recorded,
            )
        return True

    def note(self, key: str, entry: Entry) -> None:
        """A row this replay wrote, for the lookups after it (later attempts of a step update it)."""
        self.journal[key] = entry
