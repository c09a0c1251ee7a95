"""The ids of a family of instances: an instance that continues as new (``step.continue_as_new``) ends,
and its successor takes the next id of its family.

The first instance keeps the id it was created with (``order-7``); its successors are ``order-7~2``,
``order-7~3``... An id given by a caller never holds ``~`` (``validation``), so a successor's id can never
be one a caller chose, and a family's ids read in order. A root id too long for its suffix is shortened,
and a digest of it is kept in the id, so that two long roots alike at their start make two families.
"""

from __future__ import annotations

import hashlib

from django_workflows.foundations.validation import MAX_INSTANCE_ID

SEPARATOR = "~"


def generation(instance_id: str) -> int:
    """Which member of its family ``instance_id`` is: 1 for the first, 2 for its successor..."""
    _, separator, number = instance_id.rpartition(SEPARATOR)
    return int(number) if separator and number.isdigit() else 1


def successor_id(instance_id: str) -> str:
    """The id of the successor of the instance ``instance_id``."""
    following = generation(instance_id) + 1
    suffix = f"{SEPARATOR}{following}"
    base = instance_id.rpartition(SEPARATOR)[0] if following > 2 else instance_id
    if len(base) + len(suffix) <= MAX_INSTANCE_ID:
        return base + suffix
    if SEPARATOR not in base:
        # A long root, shortened from here on; its digest keeps it apart from others alike at the start.
        base = f"{base}{SEPARATOR}{hashlib.sha256(base.encode()).hexdigest()[:8]}"
    head, _, digest = base.rpartition(SEPARATOR)
    return f"{head[: MAX_INSTANCE_ID - len(digest) - 1 - len(suffix)]}{SEPARATOR}{digest}{suffix}"
