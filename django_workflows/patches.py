"""What ``step.patched`` and ``step.deprecate_patch`` do on the replay (Temporal's ``patched``): change a
workflow's code under instances that already began, old ones taking the old path and new ones the new.

    if step.patched("fraud-check"):
        step.do("check for fraud", check)

The answer is remembered so that every replay of an instance gets the same one:

- The first time a replay reaches ``patched(id)``, a marker for it in the journal (a row of kind
  ``patch``) answers True: the instance took the new path there before.
- Without one, if the journal has no step beyond this point (run() reaches new ground: a new instance,
  or an old one that had not got this far when the code changed), a marker is written and the answer is
  True.
- Otherwise (an old instance replaying steps journaled before the patch existed, so it has already
  passed this point on the old code), the answer is False, and nothing is written.

A marker is not a step: it takes no position among the steps (the n-th step run() calls is still the
n-th step journaled, markers aside), does not count toward ``step_limit``, and a False answer takes no
position either, so an old journal lines up with the new code's steps exactly as the old code's did.
The marker keeps how many steps run() had called when it was written; reaching ``patched(id)`` after
another number of steps on a later replay (the call moved among the steps) is a ``NonDeterminismError``.
The answer is also remembered for the rest of the replay: the same id asked twice answers the same.

Mixed into the replay's steps (``step.JournaledSteps``), beside the waits.
"""

from __future__ import annotations

from django_workflows import clock
from django_workflows.errors import InvalidStepInput, NonDeterminismError
from django_workflows.models import StepKind, StepStatus
from django_workflows.replay_state import ReplayState
from django_workflows.store.journal import Entry
from django_workflows.validation import validate_step_name


def marker_key(change_id: str) -> str:
    """The journal key of a patch's marker. A step's key always ends in ``-<count>``; this one never
    does, so no step name can take it."""
    return f"patched({change_id})"


class PatchSteps(ReplayState):
    def patched(self, change_id: str, deprecated: bool = False) -> bool:
        """Whether this instance takes the code guarded by ``change_id``; see the module's docstring.
        ``deprecated``: asked by ``step.deprecate_patch``, whose caller takes the new code whatever the
        answer."""
        try:
            validate_step_name(change_id)
        except InvalidStepInput:
            raise InvalidStepInput(
                f"step.patched({change_id!r}): a change id is a string of 1 to 256 characters without control "
                "characters, as a step name is"
            ) from None
        if change_id in self.patches:
            return self.patches[change_id]
        self.check_step_call(f"patched({change_id})")
        key = marker_key(change_id)
        position = self.keys_taken
        entry = self.journal.get(key)
        if entry is not None:
            recorded = entry.result.get("after_steps") if isinstance(entry.result, dict) else None
            if recorded is not None and recorded != position:
                self.fail_fatally(NonDeterminismError(
                    f"Instance {self.instance}: step.patched({change_id!r}) was reached after {position} "
                    f"steps, but the journal recorded it after {recorded} (the call moved among the steps "
                    "since the instance took the patch). Keep step.patched where it was when the patch was "
                    "deployed; move the code it guards instead.",
                    step=key, position=position, journaled_position=recorded,
                ))
            answer = True
        elif position < len(self.step_order()):
            # The instance went on past this point on the code before the patch: it keeps to that code.
            answer = False
        else:
            self.record_patch(key, change_id, position, deprecated)
            answer = True
        self.patches[change_id] = answer
        return answer

    def record_patch(self, key: str, change_id: str, position: int, deprecated: bool) -> None:
        """Journal the marker; an ``async def run`` has it written once its event loop is idle (no
        database call may run inside the loop)."""
        marker = {"key": key, "name": change_id, "kind": StepKind.PATCH, "status": StepStatus.SUCCEEDED,
                  "result": {"patched": True, "after_steps": position},
                  "config": {"deprecated": True} if deprecated else None}
        if self.markers_deferred:
            self.pending_markers.append(marker)
        else:
            self._write_marker(marker)

    def write_pending_markers(self) -> None:
        """Write the markers an async run() asked for while its event loop ran."""
        while self.pending_markers:
            self._write_marker(self.pending_markers.pop(0))

    def _write_marker(self, marker: dict) -> None:
        now = clock.now()
        # A marker is not a step: a pause asked meanwhile is taken at the next step, not here.
        step_id, _ = self.writer.insert(started_at=now, ended_at=now, **marker)
        self.journal[marker["key"]] = Entry(step_id, StepKind.PATCH, StepStatus.SUCCEEDED, [], marker["result"],
                                            None, None, now)

    def step_order(self) -> list[str]:
        """The journal's step keys in the order they were first written, markers left out."""
        if self.journaled_order is None:
            # Rows are written in the order run() called the steps, and ids grow with each write.
            self.journaled_order = [key for key, entry in sorted(self.journal.items(), key=lambda item: item[1].id)
                                    if entry.kind != StepKind.PATCH]
        return self.journaled_order
