"""A journaled value as ``run()`` gets it back: a large value read from file storage first
(``large_values``), then its typed values revived (``serialization``). The two compose in that order
because a large value is stored as the journal's tagged JSON text: the journal row holds the file's
reference, which carries no tags of its own, so what the file holds is revived whatever the row said."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_workflows.shared import large_values
from django_workflows.shared.serialization import revive


def read_back(value: Any, typed: bool, where: Callable[[], str]) -> Any:
    """``value`` as journaled (parsed JSON); ``typed``: its row's text held tags; ``where`` names the
    instance and step for an error about the file."""
    from_file = large_values.reference_of(value) is not None
    loaded = large_values.load(value, where)  # a reference read back, a wrapped object of the user's unwrapped
    return revive(loaded) if from_file or typed else loaded
