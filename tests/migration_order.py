"""The app's migrations in the order ``migrate`` applies them, as the migration tests walk them."""

from django.db import connection
from django.db.migrations.loader import MigrationLoader

APP = "django_workflows"


def loader() -> MigrationLoader:
    return MigrationLoader(connection, ignore_no_migrations=True)


def in_order(found: MigrationLoader | None = None) -> list[str]:
    """The app's migration names, first to last, read from ``found`` (a new loader by default)."""
    graph = (found or loader()).graph
    (leaf,) = graph.leaf_nodes(APP)
    return [name for app, name in graph.forwards_plan(leaf) if app == APP]
