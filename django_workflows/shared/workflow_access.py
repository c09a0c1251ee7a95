"""Who may see and steer which instance: the one rule every surface asks (the API, the admin, the
approval queue, the command line given ``--user``, ``send_event(user=...)``).

Three layers, each narrowing the one before; a project that configures nothing has the first alone:

1. the ``Instance`` model's permissions, as Django's admin reads them: ``view_instance`` (or
   ``change_instance``) to see instances, ``change_instance`` to steer them, ``send_event`` to send
   them events. The surfaces check these as they always have.
2. with ``WORKFLOW_PERMISSIONS`` on, a permission per workflow besides: ``django_workflows.view:<name>``,
   ``django_workflows.steer:<name>`` and ``django_workflows.send_event:<name>``, created for every
   workflow after each ``migrate`` as Django creates a model's (a ``post_migrate`` handler, so a new
   workflow needs no migration of its own).
3. ``INSTANCE_ACCESS``, the dotted path of a callable ``(user, action) -> Q | None``: the instances
   this user may ``action`` (``"view"``, ``"steer"``, ``"send_event"``) as a filter on ``Instance``
   (``Q(params__tenant=user.profile.tenant)``, or ``Q(pk__in=...)`` from django-guardian), or None for
   no narrowing. A filter rather than a yes/no per instance, so that lists and counts are narrowed by
   the same rule that refuses a detail, in the same query.

An active superuser passes the second and third, as Django's own ``has_perm`` lets them pass everything.
An instance a user may not see is, to them, an instance that does not exist: every surface answers as
it does for a missing id.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Q, QuerySet

from django_workflows.foundations.conf import workflow_settings

VIEW = "view"
STEER = "steer"
SEND = "send_event"
ACTIONS = {
    VIEW: "Can view instances of workflow {}",
    STEER: "Can steer instances of workflow {} (pause, resume, terminate, restart)",
    SEND: "Can send events to instances of workflow {}",
}
APP_LABEL = "django_workflows"
# What each action needs of the Instance model's own permissions: any one of them (change implies
# view, as in Django's admin).
MODEL_PERMISSIONS = {
    VIEW: (f"{APP_LABEL}.view_instance", f"{APP_LABEL}.change_instance"),
    STEER: (f"{APP_LABEL}.change_instance",),
    SEND: (f"{APP_LABEL}.send_event",),
}
EVERYTHING = Q()
Instances = TypeVar("Instances", bound=QuerySet)


def codename(action: str, workflow_name: str) -> str:
    # A colon cannot occur in a model's permissions ("view_instance") nor in a workflow's name, so
    # "view:instance" can never be mistaken for one.
    return f"{action}:{workflow_name}"


def permission(action: str, workflow_name: str) -> str:
    """The per-workflow permission, as ``user.has_perm`` takes it: ``"django_workflows.view:refund"``."""
    return f"{APP_LABEL}.{codename(action, workflow_name)}"


def _trusted(user: Any) -> bool:
    # None is Python code that names no user: trusted like the rest of the project's code.
    return user is None or (user.is_active and user.is_superuser)


def holds_model_permission(user: Any, action: str) -> bool:
    return user is None or any(user.has_perm(perm) for perm in MODEL_PERMISSIONS[action])


def may_use_workflow(user: Any, action: str, workflow_name: str) -> bool:
    """Whether the per-workflow permission lets ``user`` do ``action`` to this workflow's instances
    (always, with ``WORKFLOW_PERMISSIONS`` off)."""
    if _trusted(user) or not workflow_settings.WORKFLOW_PERMISSIONS:
        return True
    return bool(user.has_perm(permission(action, workflow_name)))


def knows_workflow(user: Any, workflow_name: str) -> bool:
    """Whether ``user`` may learn that the workflow exists: any of its per-workflow permissions."""
    return any(may_use_workflow(user, action, workflow_name) for action in ACTIONS)


def instances_filter(user: Any, action: str) -> Q:
    """The instances ``user`` may ``action``, as a filter on ``Instance``: ``EVERYTHING`` when nothing
    narrows it (then callers need no query to check one instance)."""
    if _trusted(user):
        return EVERYTHING
    narrowed = EVERYTHING
    if workflow_settings.WORKFLOW_PERMISSIONS:
        prefix = f"{APP_LABEL}.{action}:"
        names = sorted(perm[len(prefix):] for perm in user.get_all_permissions() if perm.startswith(prefix))
        narrowed &= Q(workflow_name__in=names)
    if workflow_settings.INSTANCE_ACCESS:
        project_rule = workflow_settings.import_string("INSTANCE_ACCESS")(user, action)
        if project_rule is not None:
            if not isinstance(project_rule, Q):
                raise TypeError(
                    f"INSTANCE_ACCESS ({workflow_settings.INSTANCE_ACCESS}) returned {type(project_rule).__name__}; "
                    "it returns a Q on Instance (the instances this user may act on), or None for all of them.")
            narrowed &= project_rule
    return narrowed


def scope(instances: Instances, user: Any, action: str) -> Instances:
    """``instances`` narrowed to those ``user`` may ``action``."""
    rule = instances_filter(user, action)
    return instances if rule == EVERYTHING else instances.filter(rule)


def allows(user: Any, action: str, instance: Any) -> bool:
    """Whether ``user`` may ``action`` this ``Instance`` row: its workflow's permission and the
    project's rule (one query when the rule narrows anything, none otherwise)."""
    if not may_use_workflow(user, action, instance.workflow_name):
        return False
    rule = instances_filter(user, action)
    return rule == EVERYTHING or type(instance)._default_manager.filter(rule, pk=instance.pk).exists()


def create_workflow_permissions(**kwargs: Any) -> None:
    """``post_migrate``: the per-workflow permissions of every workflow defined, created if missing,
    as Django creates a model's after each migrate (never changed or deleted: a workflow removed
    keeps its permissions, as its instances are kept)."""
    from django.apps import apps as global_apps
    from django.db import DEFAULT_DB_ALIAS, router

    from django_workflows.shared.definition import registry

    using = kwargs.get("using", DEFAULT_DB_ALIAS)
    apps = kwargs.get("apps", global_apps)
    try:
        Permission = apps.get_model("auth", "Permission")
        ContentType = apps.get_model("contenttypes", "ContentType")
        Instance = global_apps.get_model(APP_LABEL, "Instance")
    except LookupError:
        return  # django.contrib.auth or contenttypes is not installed: no permissions to create
    if not router.allow_migrate_model(using, Permission):
        return
    content_type = ContentType.objects.db_manager(using).get_for_model(Instance, for_concrete_model=True)
    wanted = {codename(action, name): text.format(name)[:255]
              for name in registry.names() for action, text in ACTIONS.items()}
    existing = set(Permission.objects.using(using).filter(content_type=content_type, codename__in=wanted)
                   .values_list("codename", flat=True))
    Permission.objects.using(using).bulk_create(
        [Permission(content_type=content_type, codename=code, name=name)
         for code, name in wanted.items() if code not in existing])
