"""What the engine, the store, the handle and the surfaces share, built on the models: a workflow's definition and options, its rules (limits, deadlines, routing, retention, transitions), values and their journaling, time, the lifecycle's signals and logs, and the change notifications.

Internal: import from here inside the package only (the public modules are listed in
``django_workflows/__init__.py``)."""
