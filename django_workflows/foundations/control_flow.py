"""The exceptions the package raises through user code to stop it, never to report an error.

Each is a BaseException, so that no ``except Exception:`` in ``run()`` or in a step's body (a saga's
compensation, a retry loop written by hand) mistakes it for a failure it may handle. Users never
catch or raise them; they are gathered here so that every such exception is in one place.
"""

from __future__ import annotations

from datetime import datetime


class Suspend(BaseException):
    """The replay must stop and wait. A BaseException, so ``except Exception:`` never swallows it."""

    def __init__(self, *, step_key: str = "", wake_at: datetime | None = None, waiting_for=None,
                 pause: bool = False, reason: str = ""):
        super().__init__(step_key)
        self.step_key = step_key
        self.wake_at = wake_at
        self.waiting_for = waiting_for
        self.pause = pause
        # What it waits out ("sleep", "retry" or "event"), for the instance_waiting signal.
        self.reason = reason


class AttemptTimedOut(BaseException):
    """Raised inside an attempt that ran past its deadline. A BaseException, so
    a user's ``except Exception:`` inside the step does not swallow it."""


class Fenced(BaseException):
    """The instance's epoch moved on (terminated, restarted, or leased elsewhere): stop this replay.

    A BaseException so that no ``except Exception:`` in user code can swallow it.
    """


class StoreError(BaseException):
    """A statement of the engine's own failed (a dropped connection, ``database is locked``, a deadlock).

    The replay is abandoned and tried again a little later: the failure is the infrastructure's, not
    the instance's, so it is never journaled as its error nor counted toward poison. A BaseException,
    so that an ``except Exception:`` in run() (a saga's compensation) never mistakes it for a step's
    failure.
    """


class EndOfJournal(BaseException):
    """run() reached a step the journal has not finished: everything before it agreed.

    Raised only by ``verification``, whose replay stops where a real one would run or write.
    """


class Terminating(BaseException):
    """``terminate(rollback=True)`` was asked: run() is stopped at the first step the journal has not
    finished, so that the undos of the steps before it run and the instance ends terminated."""


class ContinueAsNew(BaseException):
    """``step.continue_as_new(params)`` was called: run() is unwound, the instance ends and its successor
    starts with ``params`` (already checked and in the journal's form). Every later step call raises it
    again, so an ``except BaseException:`` in run() cannot go on past it."""

    def __init__(self, params) -> None:
        super().__init__("continue as new")
        self.params = params
