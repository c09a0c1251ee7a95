from django.contrib import admin
from django.urls import include, path

from tests.testapp import async_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("workflows/", include("django_workflows.api.urls")),
    path("async/<str:name>/", async_views.start_and_wait),
    path("async/<str:name>/<str:instance_id>/event/", async_views.send_and_wait),
]
