from django.contrib import admin
from django.urls import include, path

# The scale benchmark requests the admin's and the API's pages in-process.
urlpatterns = [
    path("admin/", admin.site.urls),
    path("workflows/", include("django_workflows.api.urls")),
]
