"""The nodes of an outline: steps, branches, loops, try blocks and exits, as ``run()`` reads in order.

A block is a list of nodes; ``Branch``, ``Try`` and ``Loop`` hold blocks of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Step:
    """One call of a step method. ``name`` is the literal step name, or None when it is computed
    (``name_source`` then holds the expression, such as ``f"item-{i}"``)."""

    kind: str
    name: str | None
    name_source: str
    detail: str = ""
    lineno: int = 0
    # wait_for_event's types when the source names them literally (None when computed).
    event_types: tuple[str, ...] | None = None

    @property
    def label(self) -> str:
        return self.name if self.name is not None else self.name_source


@dataclass
class Arm:
    """One way through a branch or one ``except`` clause: its label and the nodes it runs."""

    label: str
    body: list = field(default_factory=list)


@dataclass
class Branch:
    """``if``/``elif``/``else``, ``match``, or a conditional expression. ``has_else`` is false when
    no arm is taken if every test fails, so the drawing adds a way around."""

    arms: list[Arm]
    has_else: bool
    kind: str = "if"
    lineno: int = 0


@dataclass
class Try:
    body: list
    handlers: list[Arm]
    orelse: list = field(default_factory=list)
    finalbody: list = field(default_factory=list)
    lineno: int = 0


@dataclass
class Loop:
    kind: str  # "for" or "while"
    header: str
    body: list
    lineno: int = 0


@dataclass
class Exit:
    kind: str  # "return" or "raise"
    value: str
    lineno: int = 0


@dataclass
class Diagram:
    workflow: str
    class_name: str
    body: list
    filename: str = ""
    error: str = ""
    """Why there is no diagram (source not available, no ``run()``); ``body`` is then empty."""

    def steps(self) -> list[Step]:
        """Every step node, in the order of the source."""
        return list(iter_steps(self.body))


def iter_steps(nodes):
    for node in nodes:
        if isinstance(node, Step):
            yield node
        elif isinstance(node, Branch):
            for arm in node.arms:
                yield from iter_steps(arm.body)
        elif isinstance(node, Try):
            yield from iter_steps(node.body)
            for arm in node.handlers:
                yield from iter_steps(arm.body)
            yield from iter_steps(node.orelse)
            yield from iter_steps(node.finalbody)
        elif isinstance(node, Loop):
            yield from iter_steps(node.body)


def matters(nodes) -> bool:
    """Whether a block holds something the diagram shows: a step, or a way out of ``run()``."""
    return any(
        isinstance(node, (Step, Exit))
        or (isinstance(node, Branch) and any(matters(arm.body) for arm in node.arms))
        or (
            isinstance(node, Try)
            and (
                matters(node.body)
                or any(matters(a.body) for a in node.handlers)
                or matters(node.orelse)
                or matters(node.finalbody)
            )
        )
        or (isinstance(node, Loop) and matters(node.body))
        for node in nodes
    )
