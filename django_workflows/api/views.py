"""The REST API, mirroring Cloudflare's Workflows API. Views validate input and call the engine."""

from __future__ import annotations

import json

from django.core.exceptions import RequestDataTooBig
from django.db import transaction
from django.http import JsonResponse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status as http
from rest_framework.exceptions import NotAuthenticated, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from django_workflows import workflows
from django_workflows.shared import declared_events, workflow_access as access
from django_workflows.client import sending
from django_workflows.foundations import subjects
from django_workflows.api import exceptions
from django_workflows.api import permissions as perms
from django_workflows.api import serializers as s
from django_workflows.api.access import APIAccess
from django_workflows.api.filters import by_subject_and_tags
from django_workflows.api.pagination import InstancePagination, whole_number
from django_workflows.api.references import with_addresses
from django_workflows.api.schema import operation
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared.definition import registry
from django_workflows.reading.describe import DETAIL_PAGE_SIZE, describe_instance, describe_workflow, instance_summary
from django_workflows.errors import InstanceFinished, InstanceNotFound, WorkflowNotFound
from django_workflows.client.instances import InstanceHandle, WorkflowHandle
from django_workflows.models import Instance, InstanceStatus
from django_workflows.shared.options import MAX_VERSION
from django_workflows.foundations.validation import validate_existing_instance_id

ERRORS = {code: OpenApiResponse(s.ErrorSerializer, description=text) for code, text in {
    400: "Invalid input (id, event type, params, retention, JSON).",
    401: "Not authenticated, or a bad webhook signature.",
    403: "Not allowed.",
    404: "Unknown workflow or instance.",
    409: "Conflict: the id exists, the transition is not allowed, the instance is finished, or the webhook "
         "delivery was received already.",
    413: "Payload over the size limit.",
    415: "Not application/json.",
    429: "The instance's inbox is full for this event (MAX_PENDING_EVENTS, or the sender's or the type's share).",
}.items()}


def errors(*codes):
    return {code: ERRORS[code] for code in codes}


class WorkflowAPIView(APIAccess, APIView):
    schema = AutoSchema()
    required_permission = perms.VIEW
    required_permissions: dict[str, str] = {}
    _workflows: dict[str, WorkflowHandle] | None = None  # this request's, by name (a view serves one request)

    def get_permissions(self):
        return [cls() for cls in workflow_settings.import_strings("API_PERMISSION_CLASSES")]

    def acting_user(self):
        """Who the access rules apply to: the request's user (None where a signature authenticates)."""
        return self.request.user

    def workflow(self, name: str):
        """The workflow's handle; one the user may not know of is missing to them, and neither answer
        lists the workflows that exist."""
        missing = WorkflowNotFound(f"No workflow named {name!r}.", workflow=name)
        # Looked up once a request: the handle carries the class that sending reads its rules from.
        if self._workflows is None:
            self._workflows = {}
        found = self._workflows
        if name not in found:
            try:
                found[name] = workflows.get(name)
            except WorkflowNotFound:
                raise missing from None
        if not access.knows_workflow(self.acting_user(), name):
            raise missing
        return found[name]

    def instance(self, name: str, instance_id: str, action: str = access.VIEW) -> Instance:
        """The instance row, if the user may ``action`` it (``access``) and the API's permission classes
        let them have it (``has_object_permission``); else the 404 of a missing instance, whichever it was,
        so that the answer tells nothing of instances the user may not see."""
        validate_existing_instance_id(instance_id)
        self.workflow(name)
        rows = access.scope(Instance.objects.for_workflow(name), self.acting_user(), action)
        missing = InstanceNotFound(f"Workflow {name!r} has no instance with id {instance_id!r}.",
                                   workflow=name, instance_id=instance_id)
        try:
            row = rows.get(instance_id=instance_id)
        except Instance.DoesNotExist:
            raise missing from None
        try:
            self.check_object_permissions(self.request, row)
        except (PermissionDenied, NotAuthenticated):
            raise missing from None
        return row

    @staticmethod
    def instance_row(handle) -> Instance:
        return Instance.objects.get(pk=handle.pk)

    def handle(self, row: Instance) -> InstanceHandle:
        return InstanceHandle.from_row(row.workflow_name, row.instance_id, row.pk,
                                       self.workflow(row.workflow_name).workflow_class)

    def created_visible(self, handles) -> None:
        """Refuse (rolling the creation back) instances their creator could not see: else a user could
        put an instance into a list the project's rule shows to someone else (another tenant's)."""
        rule = access.instances_filter(self.request.user, access.VIEW)
        if rule == access.EVERYTHING:
            return
        pks = [handle.pk for handle in handles]
        if Instance.objects.filter(rule, pk__in=pks).count() != len(set(pks)):
            raise PermissionDenied("You could not see the instance this would create (INSTANCE_ACCESS); "
                                   "nothing was created.")

    def json_body(self, request, *, required: bool, empty=None):
        """The request body as JSON, with 415, 413 and 400 for what is wrong with it; ``empty`` when
        there is no body and none is required."""
        try:
            body = request.body
        except RequestDataTooBig:
            raise exceptions.PayloadTooLarge("The request body is over the server's upload limit.") from None
        # Checked before an empty body is allowed: a cross-site form (text/plain, no preflight) may post
        # an empty body, and the content type is what tells it from this API's own clients.
        content_type = request.content_type.split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            raise exceptions.UnsupportedMediaType(
                f"Content-Type {request.content_type or '(none)'!r} is not supported; send application/json "
                "(with an empty body too).")
        # Only a body of no bytes at all is "no body": whitespace alone is not JSON, and is refused as such.
        if not body:
            if required:
                raise exceptions.MalformedJSON("The request body is empty; send a JSON document.")
            return empty
        if len(body) > workflow_settings.MAX_EVENT_PAYLOAD_SIZE + 1024 * 64:
            raise exceptions.PayloadTooLarge(
                f"The body is {len(body)} bytes, over the limit of {workflow_settings.MAX_EVENT_PAYLOAD_SIZE}.")
        try:
            return json.loads(body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise exceptions.MalformedJSON(f"The request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise exceptions.MalformedJSON("The request body is nested too deeply.") from None


def no_such_endpoint(request, *args, **kwargs):
    hint = "" if request.path.endswith("/") else " API addresses end with '/'."
    return JsonResponse({"error": {"code": "not_found", "message": f"No API endpoint at this address.{hint}"}},
                        status=404)


IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER, str, OpenApiParameter.HEADER, required=False,
    description="Store the event once per instance and key: a repeat with the same type and payload "
                "answers as the first did (the same event_id); with another, 409 idempotency_key_reused.")


def idempotency_key(request) -> str | None:
    return request.headers.get(IDEMPOTENCY_HEADER)


class WorkflowListView(WorkflowAPIView):
    @operation(operation_id="workflows_list", responses={200: s.WorkflowSerializer(many=True), **errors(401, 403)})
    def get(self, request):
        user = request.user
        within = access.instances_filter(user, access.VIEW)
        described = [describe_workflow(name, within) for name in registry.names() if access.knows_workflow(user, name)]
        return Response(s.WorkflowSerializer(described, many=True).data)


class WorkflowDetailView(WorkflowAPIView):
    @operation(operation_id="workflows_retrieve", responses={200: s.WorkflowSerializer, **errors(401, 403, 404)})
    def get(self, request, name):
        self.workflow(name)
        within = access.instances_filter(request.user, access.VIEW)
        return Response(s.WorkflowSerializer(describe_workflow(name, within)).data)


def subject_row(data):
    """The row a create's ``"subject": "app.model:pk"`` names, or None; none there is a 400 before any insert."""
    return None if data.get("subject") is None else subjects.load(data["subject"])


class InstanceListView(WorkflowAPIView):
    required_permissions = {"POST": perms.ADD}

    @operation(
        operation_id="instances_list",
        parameters=[OpenApiParameter("status", str, enum=InstanceStatus.values, required=False),
                    OpenApiParameter("version", str, required=False,
                                     description="Only the instances created under this version."),
                    OpenApiParameter("subject", str, required=False,
                                     description="Only the instances about this row: app_label.model:pk "
                                                 "(shop.order:42)."),
                    OpenApiParameter("tag.<key>", str, required=False,
                                     description="Only the instances holding this tag: ?tag.tenant=acme; "
                                                 "several tags must all match."),
                    OpenApiParameter("page", int, required=False), OpenApiParameter("per_page", int, required=False)],
        responses={200: s.InstancePageSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request, name):
        self.workflow(name)
        rows = access.scope(Instance.objects.for_workflow(name), request.user, access.VIEW).order_by("-created_at", "-id")
        wanted = request.query_params.get("status")
        if wanted is not None:
            if wanted not in InstanceStatus.values:
                raise exceptions.WorkflowAPIError(
                    f"Unknown status {wanted!r}; use one of {', '.join(InstanceStatus.values)}.", "invalid_status")
            rows = rows.filter(status=wanted)
        version = request.query_params.get("version")
        if version is not None:
            if len(version) > MAX_VERSION or not version.isprintable():
                raise exceptions.WorkflowAPIError(
                    f"A version is at most {MAX_VERSION} printable characters, got {version[:100]!r}.")
            rows = rows.filter(version=version)
        rows = by_subject_and_tags(rows, request.query_params)
        paginator = InstancePagination()
        page = paginator.paginate_queryset(rows, request, view=self)
        return paginator.get_paginated_response([instance_summary(row) for row in page])

    @operation(operation_id="instances_create", request=s.CreateInstanceSerializer,
                   responses={201: s.InstanceSerializer, 200: s.InstanceSerializer,
                              **errors(400, 401, 403, 404, 409, 413, 415)})
    def post(self, request, name):
        handle = self.workflow(name)
        data = self.json_body(request, required=False, empty={})
        serializer = s.CreateInstanceSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            data = serializer.validated_data
            created = handle.create(id=data.get("instance_id"), params=data.get("params"),
                                    retention=data.get("retention"), subject=subject_row(data), tags=data.get("tags"),
                                    timeout=data.get("timeout"), start_at=data.get("start_at"),
                                    start_in=data.get("start_in"), debounce=data.get("debounce"),
                                    priority=data.get("priority"), queue=data.get("queue"))
            self.created_visible([created])
        # A debounced trigger that joined an instance created none.
        return Response(s.InstanceSerializer(describe_instance(self.instance_row(created))).data,
                        status=http.HTTP_200_OK if created.joined else http.HTTP_201_CREATED)


class InstanceBatchView(WorkflowAPIView):
    required_permission = perms.ADD

    @operation(operation_id="instances_batch", request=s.BatchItemSerializer(many=True),
                   responses={201: s.InstanceSummarySerializer(many=True), **errors(400, 401, 403, 404, 413, 415)})
    def post(self, request, name):
        handle = self.workflow(name)
        serializer = s.BatchSerializer(data=self.json_body(request, required=True))
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            created = handle.create_batch([
                {"id": item.get("instance_id"), "params": item.get("params"), "retention": item.get("retention"),
                 "subject": subject_row(item), "tags": item.get("tags"), "timeout": item.get("timeout"),
                 "priority": item.get("priority"), "queue": item.get("queue")}
                for item in serializer.validated_data
            ])
            self.created_visible(created)
        rows = Instance.objects.in_bulk([h.pk for h in created])
        summaries = [instance_summary(rows[h.pk]) for h in created]
        return Response(s.InstanceSummarySerializer(summaries, many=True).data, status=http.HTTP_201_CREATED)


class InstanceDetailView(WorkflowAPIView):
    @operation(
        operation_id="instances_retrieve",
        parameters=[OpenApiParameter("steps_page", int, required=False),
                    OpenApiParameter("events_page", int, required=False),
                    OpenApiParameter("per_page", int, required=False,
                                     description=f"Steps and events a page (default {DETAIL_PAGE_SIZE}, at most 1000).")],
        responses={200: s.InstanceSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request, name, instance_id):
        pages = {}
        for parameter, default, high in (("steps_page", 1, 10**9), ("events_page", 1, 10**9),
                                         ("per_page", DETAIL_PAGE_SIZE, 1000)):
            raw = request.query_params.get(parameter)
            if raw is not None and not whole_number(raw, 1, high):
                raise exceptions.WorkflowAPIError(
                    f"{parameter} must be a whole number from 1 to {high}, got {raw[:100]!r}.", "invalid_page")
            pages[parameter] = default if raw is None else int(raw)
        described = describe_instance(self.instance(name, instance_id), **pages)
        return Response(s.InstanceSerializer(with_addresses(described, request)).data)


class InstanceStatusView(WorkflowAPIView):
    required_permission = perms.CHANGE

    @operation(operation_id="instances_change_status", request=s.StatusChangeSerializer,
                   responses={200: s.InstanceSummarySerializer, **errors(400, 401, 403, 404, 409, 415)})
    def patch(self, request, name, instance_id):
        row = self.instance(name, instance_id)
        if not access.allows(request.user, access.STEER, row):
            raise PermissionDenied(f"You may see instance {name}/{instance_id} but not steer it.")
        handle = self.handle(row)
        serializer = s.StatusChangeSerializer(data=self.json_body(request, required=True))
        serializer.is_valid(raise_exception=True)
        change = serializer.validated_data
        if "from" in change:
            handle.restart(from_step=change["from"]["name"], count=change["from"]["count"])
        elif change.get("rollback"):
            handle.terminate(rollback=True)
        else:
            getattr(handle, change["status"])()
        return Response(s.InstanceSummarySerializer(instance_summary(self.instance_row(handle))).data)


class InstanceEventView(WorkflowAPIView):
    required_permission = perms.SEND_EVENT
    delivery: str | None = None
    channel = declared_events.API

    def sender(self, request) -> str | None:
        return None  # the handle records the user: "api:<username>"

    def sending_user(self, request):
        return request.user

    @operation(operation_id="instances_send_event", request={"application/json": {}},
                   parameters=[IDEMPOTENCY_PARAMETER],
                   responses={202: s.EventAcceptedSerializer, **errors(400, 401, 403, 404, 409, 413, 415, 429)})
    def post(self, request, name, instance_id, event_type):
        user = self.sending_user(request)
        try:
            row = self.instance(name, instance_id, access.SEND)
        except InstanceNotFound:
            # A type this user may not send is refused for a missing instance as for one that exists
            # (where send_event refuses it), so that the refusal says nothing of whether it exists.
            sending.authorize(name, event_type, self.channel, user)
            raise
        payload = self.json_body(request, required=False)
        sees_it = access.holds_model_permission(user, access.VIEW) and access.allows(user, access.VIEW, row)
        # The handle checks the type, the sender and the payload, and stores the event.
        try:
            sent = self.handle(row).send_event(type=event_type, payload=payload, channel=self.channel, user=user,
                                               sender=self.sender(request), delivery=self.delivery,
                                               idempotency_key=idempotency_key(request))
        except InstanceFinished as exc:
            if sees_it:
                raise
            # Whether it completed, errored or was terminated is the instance's to tell its viewers.
            raise InstanceFinished(f"Instance {name}/{instance_id} no longer takes events.", workflow=name,
                                   instance_id=instance_id, action="send_event") from exc
        summary = instance_summary(self.instance_row(row)) if sees_it else None
        accepted = {"accepted": True, "event_id": sent.event_id, "instance": summary, "type": event_type}
        return Response(s.EventAcceptedSerializer(accepted).data, status=http.HTTP_202_ACCEPTED)
