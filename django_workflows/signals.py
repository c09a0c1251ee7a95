"""Signals sent by the engine, for metrics and audits.

Every signal is sent with ``sender=Instance`` (the model class) and these keyword arguments, besides
its own: ``instance_pk`` (the instance's primary key), ``instance_id`` (its id within its workflow) and
``workflow_name``. A receiver must take ``**kwargs``: more arguments may come.

The replay's own:

``replay_started(epoch, started)``
    once a replay holds the lease; ``started`` is ``time.time()`` just after the lease was taken.
``replay_finished(epoch, outcome, started, released)``
    when it has let go, with ``outcome`` one of "complete", "errored", "terminated", "waiting",
    "queued", "paused", "fenced", or "abandoned" (a statement of the engine's own failed; the instance
    is replayed again shortly). ``released`` is ``time.time()`` just before the write that released
    the lease, or, for a replay whose lease lapsed unrenewed before that, the moment it lapsed (it
    wrote nothing and started no step body after it), so the intervals of one instance's replays
    never overlap.

These two are sent at once, in the replay's thread. The instance's life, each sent once the write
that journaled it has committed (a replay, or a ``create()``, ``pause()``... run inside a transaction
of yours sends them when it commits, through ``transaction.on_commit``); ``instance_started``,
``timer_fired`` for a retry and ``step_retrying`` for a retry without delay tell of no write of their
own, and are sent as they happen:

``instance_created()``
    by ``create()`` and ``create_batch()`` (once for each instance it created).
``instance_started(epoch, resumed)``
    a replay is about to run ``run()``; ``resumed`` is False when the journal is empty (the first
    replay, or the first after a restart from the top), True when it goes on from journaled steps.
``step_succeeded(step_key, step_name, kind, attempt, result)``
    a step was journaled as succeeded: a ``step.do`` (``kind`` "do", ``attempt`` the attempt that
    succeeded, ``result`` its value, or ``REDACTED`` for a step whose config says
    ``"sensitive": "output"``), a sleep that ended ("sleep", ``attempt`` and ``result`` None) or a wait
    that took its event ("waitForEvent", ``attempt`` None, ``result`` the ``WorkflowStepEvent``). ``kind``
    is the journal's (``Step.kind``).
``step_retrying(step_key, step_name, kind, attempt, error, wake_at)``
    an attempt of a ``step.do`` failed with ``error`` (the exception) and another will run: at
    ``wake_at``, or at once in the same replay when ``wake_at`` is None (that attempt is journaled with
    the next one's outcome).
``step_failed(step_key, step_name, kind, attempt, error)``
    a step was journaled as failed for good: a ``step.do`` whose last attempt failed, or whose error
    is not retried (``NonRetryableError``), or a wait that timed out ("waitForEvent", ``attempt`` None,
    ``error`` the ``WorkflowTimeoutError``).
``timer_fired(step_key, step_name, kind, wake_at, late_by)``
    a replay reached a step whose wake time had come: ``kind`` "sleep" (a sleep ending), "retry" (an
    attempt after a retry's delay) or "timeout" (a wait's deadline); ``late_by`` (a ``timedelta``, never
    negative) is how long after ``wake_at`` the replay took the lease.
``instance_waiting(step_key, reason, wake_at, waiting_for)``
    a replay left the instance waiting: ``reason`` "sleep", "retry" (a retry's delay), "event" or
    "unregistered" (its workflow is not registered in that process); ``wake_at`` is when it wakes
    (None for an event without a deadline), ``waiting_for`` the event types it takes (or None).
``instance_paused(step_key)``
    the instance is paused: at once by ``pause()`` when no replay ran, or by the replay that was
    running when it was asked, at its next step (``step_key``; "" from ``pause()``). Not sent when that
    replay's worker died and the sweeper pauses the instance as its lease expires.
``instance_resumed()``
    ``resume()`` queued a paused instance again (not sent when it withdraws a pause not yet taken).
``instance_restarted(from_step)``
    ``restart()`` queued it again: from the top (``from_step`` None) or from that step's key.
``instance_completed(output)``
    ``run()`` returned ``output``, and the instance is complete.
``instance_errored(error, rollback)``
    the instance errored with ``error`` (the exception); ``rollback`` is the outcome of the undos that
    ran first (``{"status", "undone", ...}``), or None.
``instance_terminated(rollback)``
    the instance is terminated: by ``terminate()`` (``rollback`` None), or, after
    ``terminate(rollback=True)``, by the replay that ran its undos (``rollback`` their outcome).

Receivers are called with ``send_robust``: an exception a receiver raises is logged (Django's
``django.dispatch`` logger) and never reaches the replay or the caller. They run in the process and
thread that made the change, a replay's receivers inside that replay: keep them quick. A signal is
sent after its write committed, so a replay that dies (or is fenced) between the two loses it, and
a replay that dies before its write runs the step again, and sends again: count on the journal, not
on signals, for exactly-once.
"""

from django.dispatch import Signal

REDACTED = "[redacted: sensitive output]"
"""What the API, the CLI, the admin, ``step_succeeded`` and the log records show for the result of a
step whose config says ``"sensitive": "output"``."""

replay_started = Signal()
replay_finished = Signal()

instance_created = Signal()
instance_started = Signal()
step_succeeded = Signal()
step_retrying = Signal()
step_failed = Signal()
timer_fired = Signal()
instance_waiting = Signal()
instance_paused = Signal()
instance_resumed = Signal()
instance_restarted = Signal()
instance_completed = Signal()
instance_errored = Signal()
instance_terminated = Signal()
