"""``POST <name>/instances/bulk/``: pause, resume, terminate or restart a workflow's instances by filter,
a bounded batch a request, through ``bulk_steering`` as every surface; a restart from a step
(``from_step``, ``count``) and a terminate with rollback (``rollback``) too."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from django_workflows.shared import audit, workflow_access as access
from django_workflows.surfaces import bulk_steering
from django_workflows.api import permissions as perms
from django_workflows.api.schema import operation
from django_workflows.api.input_fields import RejectUnknownFields
from django_workflows.api.views import WorkflowAPIView, errors
from django_workflows.models import Instance
from django_workflows.shared.transitions import TRANSITIONS


class BulkSteerSerializer(RejectUnknownFields, serializers.Serializer):
    action = serializers.ChoiceField(choices=[(t.action, t.summary) for t in TRANSITIONS.values()])
    where = serializers.DictField(
        help_text="The instances to steer: {filter: value or [values]}, values of one filter being alternatives "
                  "and filters combining. Filters: status, id (and workflow, the one in the address).")
    limit = serializers.IntegerField(
        required=False, default=bulk_steering.DEFAULT_BATCH, min_value=1, max_value=bulk_steering.MAX_BATCH,
        help_text=f"At most this many instances are changed (default {bulk_steering.DEFAULT_BATCH}, at most "
                  f"{bulk_steering.MAX_BATCH}); 'more' in the answer says whether others matched.")
    dry_run = serializers.BooleanField(required=False, default=False,
                                       help_text="Only say which instances would be changed.")
    from_step = serializers.CharField(
        required=False, allow_null=True, default=None, trim_whitespace=False,
        help_text="restart only: run again from this journaled step, keeping the steps before it; only the "
                  "instances whose journal holds it are selected.")
    count = serializers.IntegerField(
        required=False, default=1, min_value=1,
        help_text="With from_step: which step of that name (default 1, the first).")
    rollback = serializers.BooleanField(
        required=False, default=False,
        help_text="terminate only: first run the undos of each instance's steps that succeeded with one.")


class RefusedSerializer(serializers.Serializer):
    id = serializers.CharField()
    message = serializers.CharField()


class BulkOutcomeSerializer(serializers.Serializer):
    action = serializers.CharField()
    from_step = serializers.CharField(required=False, help_text="The step a restart ran again from.")
    from_step_count = serializers.IntegerField(required=False,
                                               help_text="Which step of that name (the request's count).")
    rollback = serializers.BooleanField(required=False, help_text="Whether a terminate rolls back first.")
    dry_run = serializers.BooleanField()
    count = serializers.IntegerField(help_text="How many instances were changed (or would be, dry run).")
    ids = serializers.ListField(child=serializers.CharField(), help_text="Their ids, oldest first.")
    refused = RefusedSerializer(many=True, help_text="Instances that matched but refused the change meanwhile.")
    more = serializers.BooleanField(help_text="Whether more instances matched than the limit: send it again.")


class InstanceBulkView(WorkflowAPIView):
    required_permission = perms.CHANGE

    @operation(operation_id="instances_bulk_steer", request=BulkSteerSerializer,
               responses={200: BulkOutcomeSerializer, **errors(400, 401, 403, 404, 415)})
    def post(self, request, name):
        self.workflow(name)
        user = request.user
        if not access.holds_model_permission(user, access.STEER) or not access.may_use_workflow(
                user, access.STEER, name):
            raise PermissionDenied(f"You may not steer instances of workflow {name!r}.")
        serializer = BulkSteerSerializer(data=self.json_body(request, required=True))
        serializer.is_valid(raise_exception=True)
        asked = serializer.validated_data
        change = bulk_steering.Change(asked["action"], from_step=asked["from_step"], count=asked["count"],
                                      rollback=asked["rollback"])
        where = bulk_steering.where_filter(asked["where"])
        instances = bulk_steering.select(change, Instance.objects.for_workflow(name).filter(where), user)
        outcome = bulk_steering.steer(change, instances, dry_run=asked["dry_run"], limit=asked["limit"],
                                      who=audit.user_sender("api", user))
        return Response(BulkOutcomeSerializer(outcome.as_dict()).data)
