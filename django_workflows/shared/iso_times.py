"""A moment's ISO text, formatted once for the two places a step's times are written.

A journaled step writes its start and end twice: in its attempts (``Attempt.journaled``: ISO text with
the zone) and in its row's ``started_at`` and ``ended_at`` columns (on SQLite, the same text without the
zone and with a space for the ``T``). Formatting a datetime is the dearest thing the interpreter does for a
step's row after the database's own work, so the last few moments formatted are remembered by identity:
the column's text is then cut from the attempt's, not formatted again. The moments remembered are held,
so an identity match is never a different datetime that reused a freed one's address.
"""

from __future__ import annotations

from datetime import datetime

# (moment, its isoformat()) for the last two moments formatted, newest first: a step's start and end.
# Replaced whole, so a thread reading it sees one pair or the other, never half of one; two threads
# formatting at once may drop each other's entry, which only costs a second formatting.
_recent: tuple[tuple[datetime | None, str], tuple[datetime | None, str]] = ((None, ""), (None, ""))


def isoformat(moment: datetime) -> str:
    """``moment.isoformat()``, remembered for the next call with the same datetime object."""
    global _recent
    first, second = _recent
    if first[0] is moment:
        return first[1]
    if second[0] is moment:
        return second[1]
    text = moment.isoformat()
    _recent = ((moment, text), first)
    return text


def naive_utc_text(moment: datetime) -> str:
    """``str(moment.replace(tzinfo=None))`` for a moment in UTC (whose ISO text ends ``+00:00``): the text
    SQLite's columns keep, cut from ``isoformat(moment)``."""
    return isoformat(moment)[:-6].replace("T", " ", 1)
