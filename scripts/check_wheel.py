"""Fail unless the wheel holds what the app needs at run time besides its Python modules."""

import sys
import zipfile

REQUIRED = (
    "django_workflows/migrations/0001_initial.py",
    "django_workflows/templates/django_workflows/api/schema_ui.html",
    "django_workflows/static/django_workflows/admin.css",
    "django_workflows/py.typed",
)

names = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = [name for name in REQUIRED if name not in names]
if missing or not any(name.startswith("django_workflows/templates/admin/") for name in names):
    sys.exit(f"{sys.argv[1]} lacks {missing or 'the admin templates'}")
print(f"== {sys.argv[1]}: {len(names)} files, templates, static files and migrations included")
