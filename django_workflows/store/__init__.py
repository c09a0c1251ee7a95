"""The store: every statement that touches an instance's lease, epoch, status or wake time, its journal
or its inbox. Nothing outside this package writes those columns.

- ``leases``: taking a replay's lease (bumping the epoch that fences it), renewing it, and who holds it.
- ``journal``: reading a journal, and a replay's fenced writes: steps, events consumed, children created,
  the release.
- ``inbox``: storing a delivered event and waking the instance that waits for it.
- ``steering``: creating instances; pause, resume, terminate, restart.
- ``dispatch``: the wake-up loop's and the sweeper's claims, and reclaiming dead processes' leases.
- ``retention``: deleting finished instances with their journal and inbox.
- ``schedules``: cron schedules' rows, and the round that creates a schedule's due slots once.

Times come from ``django_workflows.shared.clock`` (the database's clock). A statement of the engine's own that
fails raises ``control_flow.StoreError``, which user code cannot catch.
"""
