"""The engine: what runs ``run()`` against an instance's journal.

A replay (``replay``) loads the journal (``journal_cursor`` reads it: keys, lookups, order, with no
database), runs ``run()`` (``async_run`` drives an ``async def run``) with a ``WorkflowStep`` (``step``), and
ends as ``replay_outcome`` decides (``replay_endings`` writes it, ``replay_costs`` adds up what it cost). Each
kind of step is a collaborator given what it uses, through the ``StepHost`` protocol (``step_host``):
``do_steps`` (``step.do``, with ``policy``'s retries and ``timeouts``' watch; ``atomic_steps`` for a step in
a transaction; ``step_functions`` for the decorator forms), ``waits`` (sleeps and events), ``child_steps``,
``patches``, ``rollbacks`` and ``concurrent_steps``. ``replay_tasks`` are what an executor runs;
``verification`` replays a journal against today's code without writing.

Nothing here is public API: a project uses ``django_workflows`` (``WorkflowEntrypoint``, ``workflows``),
``django_workflows.cloudflare`` and ``django_workflows.testing`` (docs/reference lists the public modules)."""
