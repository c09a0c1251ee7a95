"""The handle (``WorkflowHandle``, ``InstanceHandle``) and what it does: create, send events, await results, steer.

Internal: import from here inside the package only (the public modules are listed in
``django_workflows/__init__.py``)."""
