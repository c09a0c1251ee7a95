"""Mount with ``path("workflows/", include("django_workflows.api.urls"))``."""

from django.urls import path, re_path

from django_workflows.api import bulk, stored_values, stream, views, webhook_view
from django_workflows.api.schema import SchemaView, schema_ui

app_name = "django_workflows_api"

# The API's operations, which its schema describes.
operations = [
    path("", views.WorkflowListView.as_view(), name="workflow-list"),
    path("<str:name>/", views.WorkflowDetailView.as_view(), name="workflow-detail"),
    path("<str:name>/instances/", views.InstanceListView.as_view(), name="instance-list"),
    path("<str:name>/instances/batch/", views.InstanceBatchView.as_view(), name="instance-batch"),
    path("<str:name>/instances/bulk/", bulk.InstanceBulkView.as_view(), name="instance-bulk"),
    path("<str:name>/instances/<str:instance_id>/", views.InstanceDetailView.as_view(), name="instance-detail"),
    path("<str:name>/instances/<str:instance_id>/status/", views.InstanceStatusView.as_view(), name="instance-status"),
    path("<str:name>/instances/<str:instance_id>/stream/", stream.InstanceStreamView.as_view(), name="instance-stream"),
    path("<str:name>/instances/<str:instance_id>/values/<str:sha256>/", stored_values.InstanceValueView.as_view(),
         name="instance-value"),
    path("<str:name>/instances/<str:instance_id>/events/<str:event_type>/", views.InstanceEventView.as_view(),
         name="instance-event"),
    path("<str:name>/instances/<str:instance_id>/webhooks/<str:event_type>/", webhook_view.WebhookView.as_view(),
         name="instance-webhook"),
]

urlpatterns = [
    # Before the operations, whose "<str:name>/" would take "schema/" for a workflow's name.
    path("schema/", SchemaView.as_view(operations=operations), name="schema"),
    path("schema/ui/", schema_ui, name="schema-ui"),
    *operations,
    # Anything else under the API's prefix (an id with a '/' in it, a missing trailing slash) is a
    # JSON 404 like every other API error, not the site's HTML page.
    re_path(r"^", views.no_such_endpoint, name="no-such-endpoint"),
]
