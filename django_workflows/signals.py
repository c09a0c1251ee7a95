"""Signals sent by the engine, for metrics and audits.

``replay_started(sender=Instance, instance_pk, epoch, workflow_name, started)`` once a replay holds the
lease; ``replay_finished(sender=Instance, instance_pk, epoch, workflow_name, outcome, released)`` when it
has let go, with ``outcome`` one of "complete", "errored", "waiting", "queued", "paused", "fenced", or
"abandoned" (a statement of the engine's own failed; the instance is replayed again shortly).
``started`` and ``released`` are ``time.time()`` just after the lease was taken and just before the
write that released it, so the intervals of one instance's replays never overlap.
"""

from django.dispatch import Signal

replay_started = Signal()
replay_finished = Signal()
