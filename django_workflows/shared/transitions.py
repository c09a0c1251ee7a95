"""The instance state machine's steering: which change applies to which status, and how each surface
names it.

One table, read by the store's conditional updates, the instance handle's refusals, the admin's buttons,
the API's status choices and the CLI's subcommands, so that none of them can offer a change another
refuses. The statuses themselves are ``InstanceStatus``; what a replay does to them (running, waiting,
complete, errored) is the engine's, not steering.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_workflows.models import ACTIVE_STATUSES, InstanceStatus


@dataclass(frozen=True)
class Transition:
    action: str
    """The handle's method, the API's ``status`` value and the CLI's subcommand."""
    past: str
    """What the surfaces report once it applied: "Instance x paused."."""
    applies_to: tuple[InstanceStatus, ...]
    """The statuses it applies to; any other refuses it with ``InvalidTransition`` and changes nothing."""
    summary: str
    """One line for the CLI's help and the API's schema."""
    confirm: str = ""
    """The question the admin asks before a change that cannot be taken back."""

    @property
    def button(self) -> str:
        return self.action.capitalize()

    def applies(self, status: str) -> bool:
        return status in self.applies_to

    def refusal(self, label: str, status: str) -> str:
        allowed = " or ".join(str(s) for s in self.applies_to)
        return (f"Cannot {self.action} instance {label}: it is {status}; "
                f"{self.action} applies to an instance that is {allowed}.")


PAUSE = Transition(
    "pause", "paused", (InstanceStatus.QUEUED, InstanceStatus.RUNNING, InstanceStatus.WAITING),
    "Pause an instance: at once if it waits, after its current step if it runs.",
)
RESUME = Transition(
    "resume", "resumed", (InstanceStatus.PAUSED, InstanceStatus.WAITING_FOR_PAUSE),
    "Resume a paused instance (or withdraw a pause not yet taken).",
)
TERMINATE = Transition(
    "terminate", "terminated", ACTIVE_STATUSES,
    "Stop an instance for good.",
    confirm="Terminate this instance for good?",
)
RESTART = Transition(
    "restart", "restarted", tuple(InstanceStatus),
    "Run an instance again from the top: its journal and consumed events are cleared.",
    confirm="Restart from the top? The journal and consumed events are cleared.",
)

TRANSITIONS: dict[str, Transition] = {t.action: t for t in (PAUSE, RESUME, TERMINATE, RESTART)}
"""Every steering change, by action, in the order the surfaces list them."""


def offered(status: str) -> list[Transition]:
    """The changes an instance in ``status`` accepts: the admin's buttons for it."""
    return [transition for transition in TRANSITIONS.values() if transition.applies(status)]
