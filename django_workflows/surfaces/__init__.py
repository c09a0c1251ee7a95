"""The surfaces besides the API, the admin, the management commands and the template tags: the CLI, the worker, the cluster's process management, bulk steering and the system checks.

Internal: import from here inside the package only (the public modules are listed in
``django_workflows/__init__.py``)."""
