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

A collaborator of the replay (``step_host``); the journal's side of the rule is the cursor's
(``JournalCursor.patch_answer``).
"""

from __future__ import annotations


from django_workflows.errors import InvalidStepInput, NonDeterminismError
from django_workflows.engine.journal_cursor import JournalCursor
from django_workflows.engine.markers import MarkerWriter
from django_workflows.models import StepKind
from django_workflows.engine.step_host import StepHost
from django_workflows.foundations.validation import validate_step_name


def marker_key(change_id: str) -> str:
    """The journal key of a patch's marker. A step's key always ends in ``-<count>``; this one never
    does, so no step name can take it."""
    return f"patched({change_id})"


class PatchSteps:
    """The replay's side of ``step.patched``, given the host, the cursor (where run() stands among the
    journal's steps) and the replay's marker writer."""

    __slots__ = ("host", "cursor", "markers", "answers")

    def __init__(self, host: StepHost, cursor: JournalCursor, markers: MarkerWriter):
        self.host, self.cursor, self.markers = host, cursor, markers
        # The answers of this replay, by change id.
        self.answers: dict[str, bool] = {}
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
        if change_id in self.answers:
            return self.answers[change_id]
        self.host.check_step_call(f"patched({change_id})")
        key = marker_key(change_id)
        try:
            answer = self.cursor.patch_answer(key, change_id)
        except NonDeterminismError as exc:
            self.host.fail_fatally(exc)
        if answer is None:
            # New ground: the instance takes the new path here, from now on.
            self.record_patch(key, change_id, deprecated)
            answer = True
        self.answers[change_id] = answer
        return answer

    def record_patch(self, key: str, change_id: str, deprecated: bool) -> None:
        """Journal the marker; an ``async def run`` has it written once its event loop is idle (no
        database call may run inside the loop)."""
        self.markers.mark(key, change_id, StepKind.PATCH, {"patched": True},
                          config={"deprecated": True} if deprecated else None)
