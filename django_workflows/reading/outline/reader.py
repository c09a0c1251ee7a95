"""The walk over ``run()``'s statements and expressions, in the order Python runs them, that turns
them into outline nodes: steps where they are called (helpers drawn inline), branches, loops, try
blocks and exits. Blocks that cannot reach a step or an exit are left out.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from django_workflows.reading.outline.nodes import Arm, Branch, Exit, Loop, Step, Try, matters
from django_workflows.reading.outline.steps import (
    MAX_CONDITION,
    arguments,
    condition,
    make_step,
    shorten,
    source,
    step_method,
)


class Reader:
    """Turns the statements of ``run()`` into diagram nodes.

    ``step_name`` is the name ``run()`` gives its step parameter; ``methods`` the other methods of the
    class, so a helper such as ``self.notify(step)`` is drawn where it is called.
    """

    def __init__(self, step_name: str, methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                 line_offset: int):
        self.step_name = step_name
        self.methods = methods
        self.line_offset = line_offset
        # Local functions in scope: decorated steps (``@step.do("b") def b(): ...``) become a step
        # where they are called; plain helpers that take steps are drawn inline where they are called.
        self.decorated: list[dict[str, Step]] = [{}]
        self.helpers: list[dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = [{}]
        self.expanding: set[str] = set()

    def line(self, node) -> int:
        return getattr(node, "lineno", 0) + self.line_offset

    # Recognising steps.

    def step_method(self, call: ast.Call) -> str | None:
        return step_method(call, self.step_name)

    def make_step(self, method: str, call: ast.Call) -> Step:
        return make_step(method, call, self.line(call))

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
            if not (matters(body) or matters(orelse)):
                return test
            return [
                *test,
                Branch(
                    arms=[Arm(f"if {condition(node.test)}", body), Arm("else", orelse)],
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
            args = arguments(method, node)
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

    def expand(self, function: ast.FunctionDef | ast.AsyncFunctionDef, key: str, call: ast.Call | None = None) -> list:
        """A helper's steps, drawn where it is called. A method is followed only when it receives the
        step object; recursion is drawn once."""
        if key in self.expanding:
            return []
        step_name: str | None = self.step_name
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
        outer = self.step_name
        self.step_name = step_name
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
        if not matters(body):
            return first
        header = " ".join(
            f"for {ast.unparse(gen.target)} in {ast.unparse(gen.iter)}" for gen in node.generators
        )
        return [
            *first,
            Loop(kind="for", header=shorten(header, MAX_CONDITION), body=body, lineno=self.line(node)),
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
            value = "" if node.value is None else source(node.value)
            if isinstance(node.value, ast.Call) and (method := self.step_method(node.value)):
                # return step.do("charge", ...): the step is drawn; the exit says what it returns.
                value = f"the result of {self.make_step(method, node.value).label}"
            return [*self.expression(node.value), Exit("return", value, self.line(node))]
        if isinstance(node, ast.Raise):
            value = "" if node.exc is None else source(node.exc)
            return [*self.expression(node.exc), Exit("raise", value, self.line(node))]
        nodes = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                nodes.extend(self.expression(child))
        return nodes

    def if_statement(self, node: ast.If) -> list:
        test_steps = self.expression(node.test)
        arms = [Arm(f"if {condition(node.test)}", self.block(node.body))]
        orelse = node.orelse
        has_else = False
        # elif chains are one branch with several arms, as they read.
        while orelse:
            if len(orelse) == 1 and isinstance(orelse[0], ast.If) and not self.expression(orelse[0].test):
                arms.append(Arm(f"elif {condition(orelse[0].test)}", self.block(orelse[0].body)))
                orelse = orelse[0].orelse
            else:
                arms.append(Arm("else", self.block(orelse)))
                has_else = True
                break
        if not any(matters(arm.body) for arm in arms):
            return test_steps
        return [*test_steps, Branch(arms=arms, has_else=has_else, lineno=self.line(node))]

    def match_statement(self, node: ast.Match) -> list:
        subject = self.expression(node.subject)
        arms = [
            Arm(
                f"case {condition(case.pattern)}" + (f" if {condition(case.guard)}" if case.guard else ""),
                self.block(case.body),
            )
            for case in node.cases
        ]
        has_else = any(
            isinstance(case.pattern, ast.MatchAs) and case.pattern.pattern is None and case.guard is None
            for case in node.cases
        )
        if not any(matters(arm.body) for arm in arms):
            return subject
        return [*subject, Branch(arms=arms, has_else=has_else, kind="match", lineno=self.line(node))]

    def loop(self, kind: str, header: str, before: list, node) -> list:
        body = self.block(node.body)
        nodes = list(before)
        if matters(body):
            nodes.append(
                Loop(kind=kind, header=shorten(header, MAX_CONDITION), body=body, lineno=self.line(node))
            )
        if node.orelse:
            nodes.extend(self.block(node.orelse))
        return nodes

    def try_statement(self, node) -> list:
        body = self.block(node.body)
        handlers = []
        for handler in node.handlers:
            label = "except" if handler.type is None else f"except {condition(handler.type)}"
            handlers.append(Arm(label, self.block(handler.body)))
        orelse, finalbody = self.block(node.orelse), self.block(node.finalbody)
        if not (
            matters(body)
            or any(matters(h.body) for h in handlers)
            or matters(orelse)
            or matters(finalbody)
        ):
            return []
        if not matters(body) and not any(matters(h.body) for h in handlers):
            return orelse + finalbody  # nothing to catch that the diagram shows: the try is noise
        return [Try(body=body, handlers=handlers, orelse=orelse, finalbody=finalbody, lineno=self.line(node))]
