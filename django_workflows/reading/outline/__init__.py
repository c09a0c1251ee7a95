"""A workflow's outline, read from the source of its ``run()``, the way Cloudflare draws a diagram from code.

    from django_workflows.reading.outline import diagram_for
    diagram = diagram_for("payment-approval")
    diagram.body   # [Step(kind="do", name="validate-payment"), ..., Try(...), Step(kind="do", name="charge")]

The parser walks ``run()`` with ``ast`` and keeps what decides the journal: the steps (``step.do`` in
both its call and decorator forms, ``step.sleep``, ``step.sleep_until``, ``step.wait_for_event``), and
the control flow around them (``if``/``elif``/``else``, ``match``, ``try``/``except``, ``for``/``while``,
``return`` and ``raise``). Code that cannot reach a step is left out. Nothing is run: names that are not
string literals are kept as the source text of their expression. Drawing is ``django_workflows.reading.drawing``.

Here: finding a class's ``run()`` and its source, and the cache by class. The parts:

- ``nodes``: what an outline is made of (``Step``, ``Branch``, ``Try``, ``Loop``, ``Exit``, ``Diagram``).
- ``reader``: the walk over ``run()``'s statements and expressions that makes them.
- ``steps``: recognising a step call and what its ``Step`` says: name, retries, duration, events.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from django_workflows.shared.definition import registry
from django_workflows.reading.outline.nodes import Arm, Branch, Diagram, Exit, Loop, Step, Try, iter_steps
from django_workflows.reading.outline.reader import Reader

__all__ = [
    "Arm",
    "Branch",
    "Diagram",
    "Exit",
    "Loop",
    "Step",
    "Try",
    "diagram_for",
    "iter_steps",
    "parse_workflow_class",
]


def _run_owner(workflow_class) -> type | None:
    for klass in inspect.getmro(workflow_class):
        if "run" in vars(klass):
            return klass
    return None


def parse_workflow_class(workflow_class) -> Diagram:
    """The diagram of a workflow class's ``run()`` (found on the class or the base it inherits it from)."""
    name = getattr(workflow_class, "name", workflow_class.__name__)
    class_name = f"{workflow_class.__module__}.{workflow_class.__qualname__}"
    owner = _run_owner(workflow_class)
    if owner is None:
        return Diagram(name, class_name, [], error="The class has no run() method.")
    try:
        lines, first_line = inspect.getsourcelines(owner)
        filename = inspect.getsourcefile(owner) or ""
    except (OSError, TypeError) as exc:
        return Diagram(
            name, class_name, [], error=f"The source of {owner.__qualname__} is not available: {exc}"
        )
    tree = ast.parse(textwrap.dedent("".join(lines)))
    class_def = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    methods = {
        node.name: node
        for node in class_def.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    run = methods.get("run")
    if run is None:
        return Diagram(
            name, class_name, [], filename=filename, error="run() was not found in the class source."
        )
    positional = [arg.arg for arg in (*run.args.posonlyargs, *run.args.args)]
    step_name = positional[2] if len(positional) > 2 else "step"
    reader = Reader(step_name, {k: v for k, v in methods.items() if k != "run"}, first_line - 1)
    return Diagram(name, class_name, reader.block(run.body), filename=filename)


@functools.lru_cache(maxsize=256)
def _cached(workflow_class) -> Diagram:
    return parse_workflow_class(workflow_class)


def diagram_for(workflow_name: str) -> Diagram:
    """The diagram of a registered workflow, parsed once per class (an unknown name: ``WorkflowNotFound``)."""
    # A class is hashable: mypy takes the __hash__ it finds for the class's instances.
    return _cached(registry.get(workflow_name))  # type: ignore[arg-type]
