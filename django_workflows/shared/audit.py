"""Who sent an event, as recorded in ``Event.sender`` for the audit trail.

One format everywhere: ``"<channel>:<who>"``, e.g. ``"api:alice"``, ``"admin:bob"``,
``"webhook:stripe"``, ``"cli:deploy"``.
"""

from __future__ import annotations

MAX_SENDER = 255


def sender(channel: str, who: str) -> str:
    return f"{channel}:{who}"[:MAX_SENDER]


def user_sender(channel: str, user) -> str:
    """The sender for an authenticated Django user acting through ``channel`` ("api", "admin")."""
    return sender(channel, user.get_username() if user is not None and user.is_authenticated else "anonymous")
