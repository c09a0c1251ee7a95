"""The rows of a golden scenario, in and out of the database, and what happens to its instances after.

Rows are read and written by plain SQL, column by column, never through today's models' encoders: the
JSON columns (a step's result, attempts and error, an event's payload, an instance's params and output)
keep the text the engine of their release wrote, so that a later change in how it encodes or decodes
them meets the old text itself. The other columns are written portably: datetimes as ISO 8601 in UTC,
durations in microseconds.

A scenario file, ``tests/golden/<release>/<scenario>.json``:

- ``rows``: ``{table: [{column: value}, ...]}`` for the instance, step and event tables;
- ``clock``: the time the rows were read at; the test's clock starts there;
- ``later``: what happens next, in order: ``{"send": {...}}`` an event to an instance, ``{"advance":
  duration}`` the clock moved on (the timers due on the way firing);
- ``expected``: each instance's end, ``{"workflow/instance id": {"status", "output", "error"}}``;
- ``bodies_run_later``: the step bodies that ran after the rows were read, ``[instance id, step key,
  runs]``: those the journal did not answer yet.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.core.management.color import no_style
from django.db import connection, models

from django_workflows import workflows
from django_workflows.models import Event, Instance, Step

GOLDEN = Path(__file__).resolve().parent
TABLES = {"instance": Instance, "step": Step, "event": Event}
"""In the order they are loaded: a step names its instance, an event the step that consumed it."""


# Reading rows as stored.

def dump_rows() -> dict[str, list[dict]]:
    """Every row of the three tables, as stored (the JSON columns as their text), oldest first."""
    return {table: _select(model) for table, model in TABLES.items()}


def _select(model) -> list[dict]:
    fields = model._meta.concrete_fields
    quote = connection.ops.quote_name
    sql = (f"SELECT {', '.join(quote(field.column) for field in fields)} FROM {quote(model._meta.db_table)} "
           "ORDER BY id")
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [{field.column: _portable(field, value) for field, value in zip(fields, row, strict=True)}
                for row in cursor.fetchall()]


def _portable(field, value):
    if value is None or isinstance(field, models.JSONField):
        return value  # the JSON text as the engine wrote it
    if isinstance(field, models.DateTimeField):
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).isoformat()
    if isinstance(field, models.DurationField):
        return value if isinstance(value, int) else value // timedelta(microseconds=1)
    if isinstance(field, models.BooleanField):
        return bool(value)
    return value


# Writing them back.

# Columns a later release renamed, {table: {old column: new column}}, or dropped ({old column: None}):
# old rows reach the new schema through its migrations, which rename or drop them the same way.
MOVED_COLUMNS: dict[str, dict[str, str | None]] = {}


def load_rows(rows: dict[str, list[dict]]) -> None:
    """Insert the rows, ids kept (the journal and the inbox name instances by id: a child's end event's
    type, a child-creating step's result), then move the id sequences past them."""
    for table, model in TABLES.items():
        _insert(table, model, rows.get(table, []))
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), list(TABLES.values())):
            cursor.execute(sql)


def _insert(table: str, model, rows: list[dict]) -> None:
    if not rows:
        return
    fields = {field.column: field for field in model._meta.concrete_fields}
    moved = MOVED_COLUMNS.get(table, {})
    columns = [moved.get(column, column) for column in rows[0]]
    unknown = [column for column in columns if column is not None and column not in fields]
    assert not unknown, (
        f"the golden rows of {table} have columns {unknown} that today's {model.__name__} lacks: say in "
        "MOVED_COLUMNS what the migration that renamed or dropped them did")
    kept = [(old, new) for old, new in zip(rows[0], columns, strict=True) if new is not None]
    quote = connection.ops.quote_name
    json_mark = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    marks = [json_mark if isinstance(fields[new], models.JSONField) else "%s" for _, new in kept]
    sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(new) for _, new in kept)}) "
           f"VALUES ({', '.join(marks)})")
    values = [[_stored(fields[new], row[old]) for old, new in kept] for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def _stored(field, value):
    if value is None or isinstance(field, models.JSONField):
        return value  # the text as written, not re-encoded
    if isinstance(field, models.DateTimeField):
        value = datetime.fromisoformat(value)
    elif isinstance(field, models.DurationField):
        value = timedelta(microseconds=value)
    return field.get_db_prep_value(value, connection)


# What happens next.

def run_later(later: list[dict], env) -> None:
    """Do what the scenario says happens after its rows were read, with ``env`` (``run_workflows()``)
    running the replays each time."""
    env.run_until_idle()
    for action in later:
        if "advance" in action:
            env.advance(action["advance"])
        else:
            sent = action["send"]
            handle = workflows.get(sent["workflow"]).get(sent["instance"])
            handle.send_event(type=sent["type"], payload=sent.get("payload"))
            env.run_until_idle()


def ends() -> dict[str, dict]:
    """How every instance stands: its status, and its output or error (the traceback left out)."""
    return {
        f"{row['workflow_name']}/{row['instance_id']}": {
            "status": row["status"], "output": row["output"], "error": row["error"]}
        for row in Instance.objects.order_by("id").values("workflow_name", "instance_id", "status", "output",
                                                          "error")
    }


def release_directories() -> list[Path]:
    return sorted(path for path in GOLDEN.iterdir() if path.is_dir() and not path.name.startswith(("_", ".")))


def scenario_files() -> list[Path]:
    return [path for directory in release_directories() for path in sorted(directory.glob("*.json"))]


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def write(path: Path, scenario: dict) -> None:
    """The scenario as JSON, one row per line, so that a diff between releases reads row by row."""
    rows = scenario["rows"]
    head = {key: value for key, value in scenario.items() if key != "rows"}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False, sort_keys=True)},")
    lines.append('  "rows": {')
    for n, (table, table_rows) in enumerate(rows.items()):
        lines.append(f"    {json.dumps(table)}: [")
        lines.extend(f"      {json.dumps(row, ensure_ascii=False)}{',' if i < len(table_rows) - 1 else ''}"
                     for i, row in enumerate(table_rows))
        lines.append(f"    ]{',' if n < len(rows) - 1 else ''}")
    lines.append("  }")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
