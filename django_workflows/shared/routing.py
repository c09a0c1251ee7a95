"""Where an instance runs and in what order: its queue, its priority, and its turn.

``queue = "heavy"`` on a workflow class (or ``create(queue=...)``) names the queue its replays are
routed to; ``workflows_worker --queues heavy,default`` serves only those, and a worker never takes an
instance of a queue it does not serve, nor one of a workflow class it does not know: such an instance
stays queued, untouched, until a worker that can run it takes it.

``priority = 5`` (or ``create(priority=...)``), a whole number from 0 to 9, higher first, orders the
instances of a queue waiting to start: a replay that finds a queued instance of its queue of higher
priority, and of an earlier turn, starts that one instead and queues its own again. So that a steady
stream of high priorities never starves a low one, priorities age: an instance's turn is its creation
time brought forward by ``PRIORITY_AGING_SECONDS`` per point of priority (``turn_at``, fixed at create), and the
claim orders by turn. A priority-9 instance goes before priority-0 ones created up to nine
``PRIORITY_AGING_SECONDS`` before it, and after those created earlier still: a low priority waits at most
(the difference in priority) × ``PRIORITY_AGING_SECONDS`` behind higher ones created after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_workflows.foundations.conf import workflow_settings
from django_workflows.errors import WorkflowConfigError
from django_workflows.foundations.validation import is_workflow_name

DEFAULT_QUEUE = "default"
MAX_QUEUE_LENGTH = 64
LOWEST_PRIORITY, HIGHEST_PRIORITY = 0, 9

_QUEUE_RULE = (f"1 to {MAX_QUEUE_LENGTH} letters, digits, '_' or '-', not starting with '-'")
_PRIORITY_RULE = f"a whole number from {LOWEST_PRIORITY} (the default) to {HIGHEST_PRIORITY} (the first to run)"


def is_queue_name(value: object) -> bool:
    # A queue is named as a workflow is: it appears in command lines, task queue names and URLs alike.
    return isinstance(value, str) and len(value) <= MAX_QUEUE_LENGTH and is_workflow_name(value)


def parse_priority(value: Any, where: str) -> int:
    """``value`` as a priority; a ``WorkflowConfigError`` naming ``where`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not LOWEST_PRIORITY <= value <= HIGHEST_PRIORITY:
        raise WorkflowConfigError(f"{where} must be {_PRIORITY_RULE}, got {value!r}")
    return value


def parse_queue(value: Any, where: str) -> str:
    """``value`` as a queue name; a ``WorkflowConfigError`` naming ``where`` otherwise."""
    if not is_queue_name(value):
        raise WorkflowConfigError(f"{where} must be a queue name of {_QUEUE_RULE}, got {value!r}")
    return str(value)


def parse_queues(value: str) -> list[str]:
    """``"heavy,default"`` (``workflows_worker --queues``) as the queue names, in order; a
    ``WorkflowConfigError`` naming the one it cannot take."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise WorkflowConfigError("--queues names no queue: give one or more, separated by commas, "
                                  "such as --queues heavy,default")
    for name in names:
        parse_queue(name, "--queues")
    return list(dict.fromkeys(names))


# The queues this process serves (``workflows_worker --queues``), None for every queue: set once by the
# worker command before it starts its cluster, whose processes inherit it.
_served: tuple[str, ...] | None = None


def serve(queues: list[str] | None) -> None:
    """Serve only ``queues`` in this process (and those it forks from now on); None for every queue."""
    global _served
    _served = None if queues is None else tuple(queues)


def served() -> tuple[str, ...] | None:
    """The queues this process serves, None for every queue."""
    return _served


@dataclass(frozen=True)
class Placement:
    """The columns of a new instance that say where and in what order it runs."""

    queue: str
    priority: int
    turn_at: datetime
    limit_key: str

    def fields(self) -> dict[str, Any]:
        return {"queue": self.queue, "priority": self.priority, "turn_at": self.turn_at,
                "limit_key": self.limit_key}


def turn(created_at: datetime, priority: int, aging: timedelta) -> datetime:
    """When an instance's turn comes, in the claim's order: its creation brought forward by ``aging``
    per point of priority."""
    return created_at - aging * priority


def aging() -> timedelta:
    """How far one point of priority brings an instance's turn forward (``PRIORITY_AGING_SECONDS``)."""
    return timedelta(seconds=workflow_settings.PRIORITY_AGING_SECONDS)
