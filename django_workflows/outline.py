"""A workflow's outline, read from the source of its ``run()``, the way Cloudflare draws a diagram from code.

    from django_workflows.outline import diagram_for
    diagram = diagram_for("payment-approval")
    diagram.body   # [Step(kind="do", name="validate-payment"), ..., Try(...), Step(kind="do", name="charge")]

The parser walks ``run()`` with ``ast`` and keeps what decides the journal: the steps (``step.do`` in
both its call and decorator forms, ``step.sleep``, ``step.sleep_until``, ``step.wait_for_event``), and
the control flow around them (``if``/``elif``/``else``, ``match``, ``try``/``except``, ``for``/``while``,
``return`` and ``raise``). Code that cannot reach a step is left out. Nothing is run: names that are not
string literals are kept as the source text of their expression. Drawing is ``django_workflows.drawing``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import dataclass, field, replace

from django_workflows.definition import registry

STEP_METHODS = {"do", "sleep", "sleep_until", "wait_for_event"}
# The parameters of each step method in order, for calls that pass them by keyword.
_PARAMETERS = {
    "do": ("name", "fn", "config"),
    "sleep": ("name", "duration"),
    "sleep_until": ("name", "timestamp"),
    "wait_for_event": ("name", "type", "timeout"),
}
MAX_SOURCE = 60
# Conditions (if, elif, case, except, loop headers) decide which way run() goes, so they are kept
# whole for the drawing to wrap over lines; this only bounds a pathological one.
MAX_CONDITION = 400


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


def _matters(nodes) -> bool:
    """Whether a block holds something the diagram shows: a step, or a way out of ``run()``."""
    return any(
        isinstance(node, (Step, Exit))
        or (isinstance(node, Branch) and any(_matters(arm.body) for arm in node.arms))
        or (
            isinstance(node, Try)
            and (
                _matters(node.body)
                or any(_matters(a.body) for a in node.handlers)
                or _matters(node.orelse)
                or _matters(node.finalbody)
            )
        )
        or (isinstance(node, Loop) and _matters(node.body))
        for node in nodes
    )


def _shorten(text: str, limit: int = MAX_SOURCE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _source(node) -> str:
    return _shorten(ast.unparse(node))


def _condition(node) -> str:
    return _shorten(ast.unparse(node), MAX_CONDITION)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _duration_text(node) -> str:
    """A duration argument as written: "1 hour", "500 ms" for a number, or its expression."""
    if node is None:
        return ""
    value = _literal(node)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g} ms"
    return _source(node)


def _config_summary(node) -> str:
    config = _literal(node) if node is not None else None
    if not isinstance(config, dict):
        return "" if node is None else f"config={_source(node)}"
    parts = []
    retries = config.get("retries")
    if isinstance(retries, dict) and "limit" in retries:
        parts.append(f"retries {retries['limit']}")
        if "delay" in retries:
            parts.append(f"delay {retries['delay']}")
    if "timeout" in config:
        parts.append(f"timeout {config['timeout']}")
    return ", ".join(str(part) for part in parts)


class _Parser:
    """Turns the statements of ``run()`` into diagram nodes.

    ``step_name`` is the name ``run()`` gives its step parameter; ``methods`` the other methods of the
    class, so a helper such as ``self.notify(step)`` is drawn where it is called.
    """

    def __init__(self, step_name: str, methods: dict[str, ast.FunctionDef], line_offset: int):
        self.step_name = step_name
        self.methods = methods
        self.line_offset = line_offset
        # Local functions in scope: decorated steps (``@step.do("b") def b(): ...``) become a step
        # where they are called; plain helpers that take steps are drawn inline where they are called.
        self.decorated: list[dict[str, Step]] = [{}]
        self.helpers: list[dict[str, ast.FunctionDef]] = [{}]
        self.expanding: set[str] = set()

    def line(self, node) -> int:
        return getattr(node, "lineno", 0) + self.line_offset

    # Recognising steps.

    def step_method(self, call: ast.Call) -> str | None:
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in STEP_METHODS
            and isinstance(func.value, ast.Name)
            and func.value.id == self.step_name
        ):
            return func.attr
        return None

    def arguments(self, method: str, call: ast.Call) -> dict[str, ast.expr]:
        given = dict(zip(_PARAMETERS[method], call.args, strict=False))
        given.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
        return given

    def make_step(self, method: str, call: ast.Call) -> Step:
        args = self.arguments(method, call)
        name_node = args.get("name")
        name = (
            name_node.value
            if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)
            else None
        )
        name_source = name if name is not None else (_source(name_node) if name_node is not None else "?")
        if method == "do":
            detail = _config_summary(args.get("config"))
        elif method == "sleep":
            detail = _duration_text(args.get("duration"))
        elif method == "sleep_until":
            detail = "until " + (_source(args["timestamp"]) if "timestamp" in args else "?")
        else:
            types = _literal(args["type"]) if "type" in args else None
            if isinstance(types, str):
                types = [types]
            literal = isinstance(types, list) and all(isinstance(t, str) for t in types)
            detail = " or ".join(types) if literal else (_source(args["type"]) if "type" in args else "?")
            timeout = args.get("timeout")  # wait_for_event's own default when not given
            detail = f"{detail}, timeout {'24 hours' if timeout is None else _duration_text(timeout)}"
            return Step(kind=method, name=name, name_source=name_source, detail=detail, lineno=self.line(call),
                        event_types=tuple(types) if literal else None)
        return Step(kind=method, name=name, name_source=name_source, detail=detail, lineno=self.line(call))

    def decorator_step(self, decorator) -> Step | None:
        """The step a decorator makes of the function under it: ``@step.do("name", config=...)``."""
        if isinstance(decorator, ast.Call) and self.step_method(decorator) == "do":
            return self.make_step("do", decorator)
        return None

    def lookup(self, scopes, name):
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        return None

    # Expressions, in the order Python evaluates them.

    def expression(self, node) -> list:
        if node is None:
            return []
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            return []  # its body runs later, inside a step, not in run() itself
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            return self.comprehension(node)
        if isinstance(node, ast.IfExp):
            test = self.expression(node.test)
            body, orelse = self.expression(node.body), self.expression(node.orelse)
            if not (_matters(body) or _matters(orelse)):
                return test
            return [
                *test,
                Branch(
                    arms=[Arm(f"if {_condition(node.test)}", body), Arm("else", orelse)],
                    has_else=True,
                    lineno=self.line(node),
                ),
            ]
        if isinstance(node, ast.Call):
            return self.call(node)
        nodes = []
        for child in ast.iter_child_nodes(node):
            nodes.extend(self.expression(child))
        return nodes

    def call(self, node: ast.Call) -> list:
        method = self.step_method(node)
        if method is not None:
            args = self.arguments(method, node)
            if method == "do" and "fn" not in args:
                return []  # step.do("name") alone only makes a decorator; calling what it decorates runs it
            nodes = []
            for value in args.values():
                nodes.extend(self.expression(value))
            return [*nodes, self.make_step(method, node)]
        # step.do("name")(fn)(): the decorator form written as calls.
        if isinstance(node.func, ast.Call) and isinstance(node.func.func, ast.Call):
            made = self.decorator_step(node.func.func)
            if made is not None:
                return [replace(made, lineno=self.line(node))]
        nodes = []
        for child in (node.func, *node.args, *(kw.value for kw in node.keywords)):
            nodes.extend(self.expression(child))
        if isinstance(node.func, ast.Name):
            decorated = self.lookup(self.decorated, node.func.id)
            if decorated is not None:
                return [*nodes, replace(decorated, lineno=self.line(node))]
            helper = self.lookup(self.helpers, node.func.id)
            if helper is not None:
                return [*nodes, *self.expand(helper, f"local:{node.func.id}")]
        if (
            isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and node.func.attr in self.methods
        ):
            method_def = self.methods[node.func.attr]
            return [*nodes, *self.expand(method_def, f"method:{node.func.attr}", node)]
        return nodes

    def expand(self, function: ast.FunctionDef, key: str, call: ast.Call | None = None) -> list:
        """A helper's steps, drawn where it is called. A method is followed only when it receives the
        step object; recursion is drawn once."""
        if key in self.expanding:
            return []
        step_name = self.step_name
        if call is not None:
            # self.helper(step) or self.helper(x, step=step): the helper names the step parameter itself.
            params = [arg.arg for arg in function.args.args[1:]]
            step_name = None
            for param, arg in zip(params, call.args, strict=False):
                if isinstance(arg, ast.Name) and arg.id == self.step_name:
                    step_name = param
            for kw in call.keywords:
                if isinstance(kw.value, ast.Name) and kw.value.id == self.step_name:
                    step_name = kw.arg
            if step_name is None:
                return []
        outer, self.step_name = self.step_name, step_name
        self.expanding.add(key)
        try:
            return self.block(function.body)
        finally:
            self.expanding.discard(key)
            self.step_name = outer

    def comprehension(self, node) -> list:
        elements = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        body = [step for element in elements for step in self.expression(element)]
        first = self.expression(node.generators[0].iter)
        if not _matters(body):
            return first
        header = " ".join(
            f"for {ast.unparse(gen.target)} in {ast.unparse(gen.iter)}" for gen in node.generators
        )
        return [
            *first,
            Loop(kind="for", header=_shorten(header, MAX_CONDITION), body=body, lineno=self.line(node)),
        ]

    # Statements.

    def block(self, statements) -> list:
        self.decorated.append({})
        self.helpers.append({})
        try:
            nodes = []
            for statement in statements:
                nodes.extend(self.statement(statement))
            return nodes
        finally:
            self.decorated.pop()
            self.helpers.pop()

    def statement(self, node) -> list:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            made = next((s for s in map(self.decorator_step, node.decorator_list) if s is not None), None)
            if made is not None:
                self.decorated[-1][node.name] = made
            elif any(isinstance(n, ast.Call) and self.step_method(n) for n in ast.walk(node)):
                self.helpers[-1][node.name] = node
            return []
        if isinstance(node, ast.ClassDef):
            return []
        if isinstance(node, ast.If):
            return self.if_statement(node)
        if isinstance(node, (ast.For, ast.AsyncFor)):
            header = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}"
            return self.loop("for", header, self.expression(node.iter), node)
        if isinstance(node, ast.While):
            return self.loop("while", f"while {ast.unparse(node.test)}", [], node)
        if isinstance(node, (ast.Try, ast.TryStar)):
            return self.try_statement(node)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            nodes = [n for item in node.items for n in self.expression(item.context_expr)]
            return nodes + self.block(node.body)
        if isinstance(node, ast.Match):
            return self.match_statement(node)
        if isinstance(node, ast.Return):
            value = "" if node.value is None else _source(node.value)
            if isinstance(node.value, ast.Call) and self.step_method(node.value):
                # return step.do("charge", ...): the step is drawn; the exit says what it returns.
                value = f"the result of {self.make_step(self.step_method(node.value), node.value).label}"
            return [*self.expression(node.value), Exit("return", value, self.line(node))]
        if isinstance(node, ast.Raise):
            value = "" if node.exc is None else _source(node.exc)
            return [*self.expression(node.exc), Exit("raise", value, self.line(node))]
        nodes = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                nodes.extend(self.expression(child))
        return nodes

    def if_statement(self, node: ast.If) -> list:
        test_steps = self.expression(node.test)
        arms = [Arm(f"if {_condition(node.test)}", self.block(node.body))]
        orelse = node.orelse
        has_else = False
        # elif chains are one branch with several arms, as they read.
        while orelse:
            if len(orelse) == 1 and isinstance(orelse[0], ast.If) and not self.expression(orelse[0].test):
                arms.append(Arm(f"elif {_condition(orelse[0].test)}", self.block(orelse[0].body)))
                orelse = orelse[0].orelse
            else:
                arms.append(Arm("else", self.block(orelse)))
                has_else = True
                break
        if not any(_matters(arm.body) for arm in arms):
            return test_steps
        return [*test_steps, Branch(arms=arms, has_else=has_else, lineno=self.line(node))]

    def match_statement(self, node: ast.Match) -> list:
        subject = self.expression(node.subject)
        arms = [
            Arm(
                f"case {_condition(case.pattern)}" + (f" if {_condition(case.guard)}" if case.guard else ""),
                self.block(case.body),
            )
            for case in node.cases
        ]
        has_else = any(
            isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None and case.guard is None
            for case in node.cases
        )
        if not any(_matters(arm.body) for arm in arms):
            return subject
        return [*subject, Branch(arms=arms, has_else=has_else, kind="match", lineno=self.line(node))]

    def loop(self, kind: str, header: str, before: list, node) -> list:
        body = self.block(node.body)
        nodes = list(before)
        if _matters(body):
            nodes.append(
                Loop(kind=kind, header=_shorten(header, MAX_CONDITION), body=body, lineno=self.line(node))
            )
        if node.orelse:
            nodes.extend(self.block(node.orelse))
        return nodes

    def try_statement(self, node) -> list:
        body = self.block(node.body)
        handlers = []
        for handler in node.handlers:
            label = "except" if handler.type is None else f"except {_condition(handler.type)}"
            handlers.append(Arm(label, self.block(handler.body)))
        orelse, finalbody = self.block(node.orelse), self.block(node.finalbody)
        if not (
            _matters(body)
            or any(_matters(h.body) for h in handlers)
            or _matters(orelse)
            or _matters(finalbody)
        ):
            return []
        if not _matters(body) and not any(_matters(h.body) for h in handlers):
            return orelse + finalbody  # nothing to catch that the diagram shows: the try is noise
        return [Try(body=body, handlers=handlers, orelse=orelse, finalbody=finalbody, lineno=self.line(node))]


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
    parser = _Parser(step_name, {k: v for k, v in methods.items() if k != "run"}, first_line - 1)
    return Diagram(name, class_name, parser.block(run.body), filename=filename)


@functools.lru_cache(maxsize=256)
def _cached(workflow_class) -> Diagram:
    return parse_workflow_class(workflow_class)


def diagram_for(workflow_name: str) -> Diagram:
    """The diagram of a registered workflow, parsed once per class (an unknown name: ``WorkflowNotFound``)."""
    return _cached(registry.get(workflow_name))
