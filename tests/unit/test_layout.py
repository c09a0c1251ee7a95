"""The package's layout: the layers in folders of their own, the public modules (``PUBLIC_MODULES``) and the
app's own at the top, no module name in two layers, and every old path still importable (``moved_modules``)."""

from __future__ import annotations

import os
from collections import defaultdict

import django_workflows

ROOT = django_workflows.__path__[0]
# The app's own modules beside the public ones: Django's, the finder of old paths, the migrations' helpers.
APP_MODULES = {"apps", "moved_modules", "migration_operations", "migration_index_drops", "migration_reruns"}
FOLDERS = {"admin", "api", "client", "engine", "executors", "foundations", "management", "migrations", "reading",
           "shared", "store", "surfaces", "templatetags"}


def test_the_top_level_holds_the_public_modules_and_the_app_s_own():
    public = {name.rpartition(".")[2] for name in django_workflows.PUBLIC_MODULES if name.count(".") == 1}
    top = {name[:-3] for name in os.listdir(ROOT) if name.endswith(".py") and name != "__init__.py"}
    assert top <= public | APP_MODULES, sorted(top - public - APP_MODULES)


def test_each_layer_is_a_folder():
    folders = {name for name in os.listdir(ROOT)
               if os.path.isfile(os.path.join(ROOT, name, "__init__.py"))}
    assert folders == FOLDERS


def test_no_module_name_stands_in_two_layers():
    # The management command's module is named for the command (manage.py workflows), which the admin's
    # pages do not share: admin/workflow_pages.py.
    where = defaultdict(list)
    for folder, _, files in os.walk(ROOT):
        if "migrations" in folder or "__pycache__" in folder:
            continue
        layer = os.path.relpath(folder, ROOT).split(os.sep)[0]
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                where[name].append(layer if layer not in ("admin", "api") else "surfaces")
    assert {name: layers for name, layers in where.items() if len(set(layers)) > 1} == {}
