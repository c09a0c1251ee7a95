"""The async twins of the handles' methods (``acreate``, ``astatus``, ``asend_event``, ``aresult``...), by
their public path: they are defined in ``django_workflows.client.async_methods``."""

from django_workflows.client.async_methods import AsyncWorkflowMethods, AsyncInstanceMethods

__all__ = ["AsyncWorkflowMethods", "AsyncInstanceMethods"]
