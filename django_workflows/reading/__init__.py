"""The read models: what the admin, the API and the CLI show of workflows and instances (describe), their drawings (drawing) and the outline of a workflow's run() (outline).

Internal: import from here inside the package only (the public modules are listed in
``django_workflows/__init__.py``)."""
