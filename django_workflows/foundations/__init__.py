"""What the models are built from, and so every layer: settings, statuses, validation, control flow, and the models' own queries of their side tables.

Internal: import from here inside the package only (the public modules are listed in
``django_workflows/__init__.py``)."""
