"""A two-tenant project, as a project would configure tenancy: two groups (tenant ``a`` and tenant ``b``),
two workflows (``approval``, which both use, and ``refund``, tenant ``b``'s alone), each workflow's own
permissions (``WORKFLOW_PERMISSIONS``), and a rule on params (``INSTANCE_ACCESS``): a member of a tenant's
group sees and steers the instances whose ``params["tenant"]`` is that tenant's.

Used by tests/integration/test_tenancy.py (the API, the admin, webhooks, the command line) and
and tests/system/test_tenancy_browser.py (the admin in Chromium).
"""

from django.contrib.auth.models import Group, Permission, User
from django.db.models import Q

from django_workflows.shared import workflow_access as access

TENANTS = ("a", "b")
WORKFLOWS = {"a": ("approval",), "b": ("approval", "refund")}
SECRETS = {"approval": "approval-secret-0123456789", "refund": "refund-secret-0123456789"}
SETTINGS = {
    "EXECUTOR": "django_workflows.executors.inline.InlineExecutor",
    "WORKFLOW_PERMISSIONS": True,
    "INSTANCE_ACCESS": "tests.tenancy.instances_of_my_tenant",
    "WEBHOOK_SECRETS": SECRETS,
}


def tenant_of(user) -> str | None:
    names = [group.name for group in user.groups.all() if group.name.startswith("tenant-")]
    return names[0].removeprefix("tenant-") if len(names) == 1 else None


def instances_of_my_tenant(user, action):
    """INSTANCE_ACCESS: a tenant's members see the instances started for their tenant, and no other."""
    tenant = tenant_of(user)
    return Q(pk__in=[]) if tenant is None else Q(params__tenant=tenant)


def make_tenants() -> dict[str, User]:
    """A group per tenant holding the model's permissions and its workflows' own, and one staff member
    in each (who logs in with force_login or a token: no password)."""
    members = {}
    for tenant in TENANTS:
        group = Group.objects.create(name=f"tenant-{tenant}")
        codenames = ["add_instance", "view_instance", "change_instance", "send_event"]
        codenames += [access.codename(action, name) for name in WORKFLOWS[tenant] for action in access.ACTIONS]
        group.permissions.set(Permission.objects.filter(content_type__app_label="django_workflows",
                                                        codename__in=codenames))
        if "refund" in WORKFLOWS[tenant]:
            group.permissions.add(Permission.objects.get(codename="approve_refund"))
        member = User.objects.create(username=f"member-{tenant}", is_staff=True)
        member.groups.add(group)
        members[tenant] = member
    return members
