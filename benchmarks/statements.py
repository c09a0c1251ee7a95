"""The statements and commits of one 3-step workflow through ``create()`` on the inline executor (issue
37, item 3: 6 commits today, the goal at most 4), counted in this process.

Statements: every one that passes the connection's ``execute`` (an execute wrapper, as
``benchmarks/querylog.py`` installs in the worker's processes, with its kinds). Commits: the
connection's own (``_commit``, which ends an atomic block; the driver sends no statement for it), plus
every write made in autocommit outside an atomic block, which the database commits by itself.
"""

from __future__ import annotations

import re
from collections import Counter

from django.db import connection

from benchmarks.querylog import classify

WRITES = ("INSERT", "UPDATE", "DELETE")
# A WITH whose part writes (PostgreSQL's data-modifying WITH: the take, a release with its kept row).
_WRITING_WITH = re.compile(r"\bAS\s*\(\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


def writes(verb: str, sql: str) -> bool:
    """Whether a statement of ``verb`` writes."""
    return verb in WRITES or (verb == "WITH" and _WRITING_WITH.search(sql) is not None)


def count(run) -> dict:
    """Call ``run()`` and return ``{"statements", "commits", "by_verb", "by_kind"}`` for what it sent."""
    verbs: Counter = Counter()
    kinds: Counter = Counter()
    commits = [0]

    def wrapper(execute, sql, params, many, context):
        verb = sql.lstrip().split(None, 1)[0].upper()
        verbs[verb] += 1
        kinds[classify(sql)] += 1
        if writes(verb, sql) and connection.get_autocommit() and not connection.in_atomic_block:
            commits[0] += 1
        return execute(sql, params, many, context)

    connection.ensure_connection()
    original = connection._commit

    def counted_commit():
        commits[0] += 1
        return original()

    connection._commit = counted_commit  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(wrapper):
            run()
    finally:
        del connection._commit  # the instance attribute goes; the class's method is back
    return {"statements": sum(verbs.values()), "commits": commits[0], "by_verb": dict(verbs),
            "by_kind": dict(kinds)}
