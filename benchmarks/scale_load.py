"""The scale benchmark's data: a million instances of a site that has run for a month, bulk-loaded with
``COPY`` into the migrated tables (their indexes and constraints as the migrations made them).

The shapes are those the engine writes: most instances complete, some errored or terminated, the live
ones waiting (asleep until a wake time, or for an event until a deadline), queued, running under a
lease, or paused. Each has a journal of 1 to 19 steps (10 on average) that ends as its status says, one
instance has 10,000 steps, and the events are those the waits consumed plus others buffered in the
inboxes. Half the instances are about a user (``create(subject=user)``, ten instances a user), and every
instance has tags (``create(tags=...)``): a tenant of 1,000 (a thousand instances each), a region of 4
(a quarter of the million each), and one in ten a customer of its own. Everything is derived from the
instance's number, so a load is the same every time.

The tables' secondary indexes and unique constraints are dropped for the load and made again after it
from the catalog's own definitions (``pg_get_indexdef``, ``pg_get_constraintdef``), so the schema ends
as the migrations left it: building an index once over sorted rows is several times quicker than
updating it row by row. The foreign keys' triggers are off during the load (``session_replication_role = replica``): the rows
refer to each other by the ids given here, which are right by construction, and checking 11 million
references one at a time would double the load. The identity sequences are moved past the ids given.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

from benchmarks.common import log

# (workflow, share of the instances): the benchmark's own workflows, so the API can list them.
WORKFLOWS = [("bench-three", 40), ("bench-waiter", 20), ("bench-timer", 15), ("bench-napper", 10),
             ("bench-steps", 10), ("bench-approval", 5)]
# (status, share in 10,000): a month of a busy site.
STATUSES = [("complete", 8800), ("errored", 300), ("terminated", 100), ("waiting", 600), ("queued", 100),
            ("running", 80), ("paused", 15), ("waitingForPause", 5)]
DAYS = 32  # created over the last 32 days: those that ended more than RETENTION_DAYS (30) ago are due
BIG_STEPS = 10_000
VERSIONS = ["2026.10.1", "2026.10.2", "2026.11.1", "2026.11.2", "2026.12.1"]
TENANTS = 1_000
REGIONS = ["eu", "us", "apac", "latam"]
SUBJECTS_EVERY = 2   # one instance in two is about a user ...
PER_SUBJECT = 10     # ... and each user has ten instances
SUBJECT_MODEL = ("auth", "user")


def tenant_of(i: int) -> str:
    return f"tenant-{(i * 7919) % TENANTS:04d}"


def region_of(i: int) -> str:
    return REGIONS[(i // 3) % len(REGIONS)]


def subject_of(i: int) -> int | None:
    """The primary key of the user instance ``i`` is about, or None for one about nothing."""
    return None if i % SUBJECTS_EVERY else 1 + (i // SUBJECTS_EVERY) // PER_SUBJECT


def _table(count: int, shares) -> list:
    """A list of ``count`` values, each ``shares``' value repeated by its share, spread evenly."""
    total = sum(share for _, share in shares)
    out = []
    for value, share in shares:
        out.extend([value] * max(1, share * count // total))
    return out


STATUS_OF = _table(10_000, STATUSES)
WORKFLOW_OF = _table(100, WORKFLOWS)


class Shape:
    """Everything about instance number ``i`` (1-based) that the three tables need."""

    __slots__ = ("i", "workflow", "status", "steps", "created", "wait_kind", "big")

    def __init__(self, i: int, total: int, big: int):
        self.i = i
        self.big = i == big
        # Knuth's multiplicative hash: neighbouring instances get unrelated statuses and workflows.
        h = (i * 2654435761) % 4294967296
        self.workflow = "bench-steps" if self.big else WORKFLOW_OF[h % 100]
        self.status = "waiting" if self.big else STATUS_OF[(h >> 8) % 10_000]
        self.steps = BIG_STEPS if self.big else 1 + (h >> 4) % 19
        self.created = DAYS * 86_400 * i // total  # seconds from the start of the month, oldest first
        # A waiting instance sleeps, waits for an event (and its deadline), or waits out a retry.
        self.wait_kind = ("sleep", "event", "event", "retry")[(h >> 20) % 4] if self.status == "waiting" else ""


class Clock:
    """Timestamps as COPY's text format writes them, from seconds after ``start``."""

    def __init__(self, start: datetime):
        self.start = start
        self.minutes: dict[int, str] = {}

    def __call__(self, seconds: float) -> str:
        whole = int(seconds)
        minute = whole // 60
        text = self.minutes.get(minute)
        if text is None:
            text = self.minutes[minute] = (self.start + timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M")
        return f"{text}:{whole % 60:02d}.{int((seconds - whole) * 1e6):06d}+00"


def _copy(connection, table: str, columns: list[str], rows, batch: int = 20_000) -> int:
    """COPY the text lines of ``rows`` into ``table``; return how many."""
    n = 0
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            chunk = []
            for line in rows:
                chunk.append(line)
                if len(chunk) >= batch:
                    copy.write("".join(chunk))
                    n += len(chunk)
                    chunk = []
            if chunk:
                copy.write("".join(chunk))
                n += len(chunk)
    return n


def _json(value) -> str:
    # COPY's text format: backslashes doubled; the JSON written here has no tab or newline.
    return json.dumps(value, separators=(",", ":")).replace("\\", "\\\\")


INSTANCE_COLUMNS = [
    "id", "workflow_name", "instance_id", "params", "status", "output", "error", "traceback", "wake_at",
    "waiting_for", "current_step", "lease_owner", "lease_expires_at", "epoch", "created_at", "started_at",
    "ended_at", "updated_at", "crash_count", "waiting_reason", "terminating", "success_retention",
    "error_retention", "purge_at", "cpu_ms", "step_wall_ms", "on_parent_end", "parent_id", "parent_step",
    "version", "subject_type_id", "subject_id",
]
STEP_COLUMNS = ["id", "instance_id", "key", "name", "kind", "status", "attempts", "config", "result", "error",
                "wake_at", "started_at", "ended_at", "settled_in"]
EVENT_COLUMNS = ["id", "instance_id", "type", "payload", "received_at", "sender", "consumed_by_id",
                 "consumed_at", "delivery"]
TAG_COLUMNS = ["id", "instance_id", "key", "value"]
N = r"\N"
FINISHED = ("complete", "errored", "terminated")


def _deadline(i: int, now_s: float) -> float:
    """A wait's deadline: within the coming week (a wait that timed out was woken and moved on)."""
    return now_s + 3600 + (i * 13) % (7 * 86_400)


def _instance_rows(total: int, big: int, ts: Clock, now_s: float, subject_type: int):
    for i in range(1, total + 1):
        s = Shape(i, total, big)
        created = s.created
        started = created + 0.05
        status = s.status
        ended = updated = None
        wake_at = waiting_for = lease_owner = lease_expires = purge_at = N
        output = error = N
        traceback = ""
        last = f"s-{s.steps}"
        if status in ("complete", "errored", "terminated"):
            ended = started + s.steps * 0.2
            updated = ended
            if status == "complete":
                output = _json({"total": s.steps})
                current = ""
            else:
                error = _json({"name": "ValueError", "message": f"card declined for order {i}"})
                traceback = "Traceback (most recent call last):\\n  ...\\nValueError: card declined" \
                    if status == "errored" else ""
                current = last
            if i % 20 == 0:  # one in twenty chose its own retention: a week
                purge_at = ts(ended + 7 * 86_400)
        else:
            current = last
            updated = min(now_s - 1, started + s.steps * 0.2)
            if status == "waiting":
                if s.wait_kind == "event":
                    waiting_for = _json(["approval" if s.workflow == "bench-approval" else "go"])
                    wake_at = ts(_deadline(i, now_s))
                elif s.wait_kind == "retry":
                    wake_at = ts(now_s + 30 + i % 600)
                else:
                    wake_at = ts(now_s + 60 + (i * 37) % (3 * 86_400))
                if i % 5000 == 0:
                    wake_at = ts(now_s - 5)  # a few are due: the wake-up loop's next batch
            elif status in ("running", "waitingForPause"):
                lease_owner = f"worker-{i % 8}.internal:{1000 + i % 50}:{i % 4}"
                # Most leases are live; one in twenty has expired (its worker died): the sweeper's work.
                lease_expires = ts(now_s + 45 if i % 20 else now_s - 30)
            elif status == "queued" and i % 10 == 0:
                updated = now_s - 600  # its replay task was lost: the sweeper enqueues it again
        version = VERSIONS[min(len(VERSIONS) - 1, created * len(VERSIONS) // (DAYS * 86_400))]
        subject = subject_of(i)
        subject_columns = f"{N}\t{N}" if subject is None else f"{subject_type}\t{subject}"
        yield (
            f"{i}\t{s.workflow}\torder-{i:08d}\t{_json({'order': i, 'items': 1 + i % 5})}\t{status}\t{output}\t"
            f"{error}\t{traceback}\t{wake_at}\t{waiting_for}\t{current}\t{lease_owner if lease_owner != N else ''}\t"
            f"{lease_expires}\t{1 + i % 3}\t{ts(created)}\t{ts(started)}\t{ts(ended) if ended else N}\t"
            f"{ts(updated)}\t0\t{N}\tf\t{'7 days' if purge_at != N else N}\t{'7 days' if purge_at != N else N}\t"
            f"{purge_at}\t{s.steps * 0.3:.1f}\t{s.steps * 1.5:.1f}\tterminate\t{N}\t{N}\t{version}\t"
            f"{subject_columns}\n"
        )


ATTEMPT = '[{{"attempt":1,"start":"{start}","end":"{end}","success":true,"cpu_ms":0.3,"wall_ms":1.5}}]'
CONFIG = _json({"retries": {"limit": 5, "delay": 10000, "backoff": "exponential"}, "timeout": 600000})


def _step_rows(total: int, big: int, ts: Clock, now_s: float, budget: int):
    """Each instance's journal; stops once ``budget`` rows are written (the big instance's first)."""
    step_id = 0
    order = [big, *(i for i in range(1, total + 1) if i != big)]
    for i in order:
        s = Shape(i, total, big)
        live_last = s.status not in FINISHED
        for n in range(1, s.steps + 1):
            if step_id >= budget:
                return
            step_id += 1
            at = s.created + 0.05 + (n - 1) * 0.2
            last = n == s.steps
            kind, status, wake_at, result, error = "do", "succeeded", N, "1", N
            attempts = ATTEMPT.format(start=ts(at).replace(" ", "T")[:-3] + "+00:00",
                                      end=ts(at + 0.002).replace(" ", "T")[:-3] + "+00:00")
            config = CONFIG
            ended = ts(at + 0.002)
            if s.workflow in ("bench-waiter", "bench-approval") and n == 1:
                kind, config, attempts = "waitForEvent", _json({"type": "go", "timeout": "1 hour"}), "[]"
                result = _json({"type": "go", "payload": {"approved": True}})
            if last and s.status == "errored":
                status, result, ended = "failed", N, ts(at + 0.5)
                error = _json({"name": "ValueError", "message": "card declined"})
            elif last and live_last:
                ended = N
                if s.wait_kind == "sleep":
                    kind, status, result, attempts = "sleep", "waiting", N, "[]"
                    wake_at = ts(now_s + 3600)
                elif s.wait_kind == "event":
                    kind, status, result, attempts = "waitForEvent", "waiting", N, "[]"
                    wake_at = ts(_deadline(i, now_s))
                elif s.wait_kind == "retry":
                    status, result, wake_at = "retrying", N, ts(now_s + 30)
                else:
                    status, result = "retrying", N
            name = "wait" if kind == "waitForEvent" else "nap" if kind == "sleep" else "s"
            yield (f"{step_id}\t{i}\t{name}-{n}\t{name}\t{kind}\t{status}\t{attempts}\t{config}\t{result}\t"
                   f"{error}\t{wake_at}\t{ts(at)}\t{ended}\t{N}\n")


def _event_rows(total: int, big: int, ts: Clock, budget: int, steps_budget: int):
    """The events: those the waits of the waiter and approval workflows consumed (their first step),
    then events buffered in the inboxes of instances waiting for one, 1,000 for the big instance."""
    event_id = 0
    step_id = BIG_STEPS
    waiting = []
    for i in range(1, total + 1):
        if i == big:
            continue
        s = Shape(i, total, big)
        first_step = step_id + 1
        step_id += s.steps
        if event_id >= budget:
            break
        if s.workflow in ("bench-waiter", "bench-approval") and (s.steps > 1 or s.status in FINISHED):
            event_id += 1
            consumed = first_step if first_step <= steps_budget else N
            at = ts(s.created + 0.06)
            yield (f"{event_id}\t{i}\tgo\t{_json({'approved': True})}\t{at}\tapi:user:7\t{consumed}\t"
                   f"{at if consumed != N else N}\t{N}\n")
        elif s.wait_kind == "event":
            waiting.append(i)
    for n in range(1_000):
        if event_id >= budget:
            return
        event_id += 1
        yield f"{event_id}\t{big}\tprogress\t{_json({'n': n})}\t{ts(DAYS * 86_400 - 3600 + n)}\tworker\t{N}\t{N}\t{N}\n"
    while waiting and event_id < budget:
        for i in waiting:
            if event_id >= budget:
                return
            event_id += 1
            yield (f"{event_id}\t{i}\tprogress\t{_json({'n': event_id})}\t{ts(DAYS * 86_400 - 7200)}\t"
                   f"webhook:shop@10.0.0.1\t{N}\t{N}\t{N}\n")


def _tag_rows(total: int):
    """Each instance's tags: its tenant and region, and one in ten its customer."""
    tag_id = 0
    for i in range(1, total + 1):
        tags = [("tenant", tenant_of(i)), ("region", region_of(i))]
        if i % 10 == 0:
            tags.append(("customer", f"customer-{i:08d}"))
        for key, value in tags:
            tag_id += 1
            yield f"{tag_id}\t{i}\t{key}\t{value}\n"


TABLES = ("django_workflows_instance", "django_workflows_step", "django_workflows_event",
          "django_workflows_instancetag")


def _secondary_indexes(connection) -> list[tuple[str, str, str, str | None]]:
    """``(table, index, CREATE INDEX statement, ADD CONSTRAINT clause or None)`` for every index of the
    loaded tables but their primary keys."""
    return connection.execute("""
        SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid),
               CASE WHEN con.oid IS NOT NULL THEN pg_get_constraintdef(con.oid) END
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = c.oid
        WHERE c.relname = ANY(%s) AND NOT i.indisprimary ORDER BY 1, 2""", [list(TABLES)]).fetchall()


def _drop(connection, indexes) -> None:
    for table, name, _, constraint in indexes:
        if constraint:
            connection.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        else:
            connection.execute(f'DROP INDEX "{name}"')


def _rebuild(connection, indexes) -> None:
    connection.execute("SET maintenance_work_mem = '1GB'")
    for table, name, definition, constraint in indexes:
        if constraint:
            connection.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {constraint}')
        else:
            connection.execute(definition)


def load(connection, instances: int, steps: int, events: int) -> dict:
    """Load the three tables through ``connection`` (a psycopg connection, autocommit); return what was
    loaded and how long each part took."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    start = now - timedelta(days=DAYS)
    ts = Clock(start)
    now_s = (now - start).total_seconds()
    big = instances // 2  # in the middle of the month: neither the newest nor the oldest
    subject_type = connection.execute("SELECT id FROM django_content_type WHERE app_label = %s AND model = %s",
                                      list(SUBJECT_MODEL)).fetchone()[0]
    timings = {}
    indexes = _secondary_indexes(connection)
    _drop(connection, indexes)
    connection.execute("SET session_replication_role = replica")
    try:
        for table, columns, rows in (
            ("django_workflows_instance", INSTANCE_COLUMNS, _instance_rows(instances, big, ts, now_s, subject_type)),
            ("django_workflows_step", STEP_COLUMNS, _step_rows(instances, big, ts, now_s, steps)),
            ("django_workflows_event", EVENT_COLUMNS, _event_rows(instances, big, ts, events, steps)),
            ("django_workflows_instancetag", TAG_COLUMNS, _tag_rows(instances)),
        ):
            began = time.monotonic()
            n = _copy(connection, table, columns, rows)
            timings[table] = {"rows": n, "seconds": round(time.monotonic() - began, 1)}
            log(f"   {table}: {n:,} rows in {timings[table]['seconds']} s")
    finally:
        connection.execute("SET session_replication_role = origin")
    began = time.monotonic()
    _rebuild(connection, indexes)
    timings["indexes"] = {"count": len(indexes), "seconds": round(time.monotonic() - began, 1)}
    log(f"   {len(indexes)} indexes built again in {timings['indexes']['seconds']} s")
    for table in TABLES:
        connection.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                           f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)")
    began = time.monotonic()
    connection.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")
    timings["vacuum_analyze"] = {"seconds": round(time.monotonic() - began, 1)}
    log(f"   VACUUM ANALYZE in {timings['vacuum_analyze']['seconds']} s")
    return {"big_instance": big, "loaded_at": now.isoformat(), "tables": timings}


def describe(connection) -> dict:
    """What an earlier load left in the database (``--reuse``): the big instance is the one whose journal
    was loaded first."""
    big = connection.execute("SELECT instance_id FROM django_workflows_step WHERE id = 1").fetchone()
    if big is None:
        raise SystemExit("--reuse: the database holds no load of the scale benchmark")
    tables = {table: {"rows": connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]}
              for table in TABLES}
    newest = connection.execute("SELECT max(created_at) FROM django_workflows_instance").fetchone()[0]
    return {"big_instance": big[0], "reused": True, "tables": tables, "loaded_at": newest.isoformat()}
