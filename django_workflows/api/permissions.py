"""API permissions mapped to the Instance model's permissions: view, add, change, and send_event."""

from rest_framework.permissions import BasePermission

VIEW = "django_workflows.view_instance"
ADD = "django_workflows.add_instance"
CHANGE = "django_workflows.change_instance"
SEND_EVENT = "django_workflows.send_event"


class WorkflowModelPermissions(BasePermission):
    """Each view names the permission it needs in ``required_permission`` (per method where it differs)."""

    message = "You do not have the permission this needs."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        required = getattr(view, "required_permissions", {}).get(request.method)
        if required is None:
            required = getattr(view, "required_permission", VIEW)
        self.message = f"This needs the permission {required!r}."
        return user.has_perm(required)
