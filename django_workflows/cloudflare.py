"""Cloudflare's Python Workflows SDK under its own names, so a workflow written for it runs here once its
imports read

    from django_workflows.cloudflare import WorkflowEntrypoint, NonRetryableError

in place of ``from workers import WorkflowEntrypoint`` and ``from workers.workflows import
NonRetryableError``. The classes are the package's own, not copies: a ported workflow and one written
for django-workflows are the same kind of thing, and can use each other's forms.

What each of Cloudflare's names is here, and where the two differ, is docs/how-to/from-cloudflare.md.
"""

from __future__ import annotations

from django_workflows.shared.definition import StepContext, WorkflowEntrypoint, WorkflowEvent, WorkflowStepEvent
from django_workflows.errors import NonRetryableError

# Cloudflare's TypeScript names for the same things (its Python SDK has no names of its own for them).
WorkflowStepContext = StepContext

__all__ = ["NonRetryableError", "WorkflowEntrypoint", "WorkflowEvent", "WorkflowStepContext", "WorkflowStepEvent"]
