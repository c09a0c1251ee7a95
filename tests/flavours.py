"""The engine suite runs each workflow twice: as written (``def run``), and as its async twin, the same
``run`` written as ``async def run`` with every step call awaited, as Cloudflare's Python SDK writes it.

``async_twin(cls)`` derives the twin from the source of ``cls.run``: ``def run`` becomes ``async def
run``, and ``await`` goes in front of each call of a step method on run's ``step`` parameter
(``step.do(name, fn)``, ``step.sleep``, ``step.sleep_until``, ``step.wait_for_event``, ``step.all``,
``step.rollback_all``) and of each call of a function run declared as a step (``@step.do(...)``,
``@step.with_rollback(...)``). The declarations themselves are not awaited: ``step.do(name)`` without a
function returns the decorator, and so does ``step.with_rollback``; nor are ``step.patched``, which
answers at once, and ``step.progress``, which reports and returns nothing. Step bodies stay as they are. The
twin subclasses the original, keeps its name, module and qualified name (its source, its outline and
its tracebacks are the original's: the new ``run`` is compiled with the original's file and line
numbers), and closes over the original's cells, so it shares the original's closure.

What cannot be rewritten raises ``NotTransformable`` saying why: a ``run`` that hands ``step`` to
code outside it (a helper function, another method), or calls a step from a nested function, a lambda
or a generator expression, where no ``await`` can reach. ``use_flavour("async")`` serves the twins in
place of the registered classes while it is active, and keeps count of what the async replays did, so
a test in the async flavour can prove that it ran ``async def run`` and that every step call it made
was awaited.
"""

from __future__ import annotations
import __future__

import ast
import inspect
import textwrap
import types
from contextlib import contextmanager
from dataclasses import dataclass, field

FLAVOURS = ("sync", "async")

# Calls on run's step parameter that return an awaitable in async def run (step.continue_as_new raises).
AWAITED_METHODS = frozenset({"do", "sleep", "sleep_until", "wait_for_event", "all", "rollback_all", "child",
                             "continue_as_new"})
# Calls on it that declare a step function (return a decorator): never awaited.
DECLARING_METHODS = frozenset({"do", "with_rollback"})
# Calls on it that answer at once, in async def run too: left as they are.
ANSWERING_METHODS = frozenset({"patched", "deprecate_patch", "progress"})
_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


class NotTransformable(Exception):
    """The workflow's run() cannot be rewritten as async def run: it runs in the sync flavour only."""


def flavoured(cls: type, flavour: str) -> type:
    """``cls`` itself in the sync flavour, its async twin in the async one."""
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour is one of {FLAVOURS}, got {flavour!r}")
    return cls if flavour == "sync" else async_twin(cls)


_twins: dict[type, type] = {}
_refusals: dict[type, NotTransformable] = {}


def async_twin(cls: type) -> type:
    """The async twin of the workflow class ``cls`` (``cls`` itself if its run is already async); made
    once per class. Raises ``NotTransformable``."""
    if cls in _refusals:
        raise _refusals[cls]
    if cls not in _twins:
        try:
            _twins[cls] = _make_twin(cls)
        except NotTransformable as exc:
            _refusals[cls] = exc
            raise
    return _twins[cls]


def sync_only_reason(cls: type) -> str | None:
    """Why ``cls`` has no async twin, or None if it has one."""
    try:
        async_twin(cls)
    except NotTransformable as exc:
        return str(exc)
    return None


def is_twin(cls: type) -> bool:
    return "_async_twin_of" in vars(cls)


def _make_twin(cls: type) -> type:
    owner = next((klass for klass in cls.__mro__ if "run" in vars(klass)), None)
    run = vars(owner)["run"] if owner is not None else None
    if not inspect.isfunction(run):
        raise NotTransformable(f"{cls.__qualname__}.run is not a plain function")
    if inspect.iscoroutinefunction(run):
        return cls
    run = _async_run(run, f"{cls.__qualname__}.run")
    namespace = {
        "run": run,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "_async_twin_of": cls,
        # Not registered: the registry keeps the original; use_flavour serves the twin in its place.
        "abstract": True,
    }
    if "__firstlineno__" in vars(cls):
        namespace["__firstlineno__"] = vars(cls)["__firstlineno__"]
    twin = type(cls)(cls.__name__, (cls,), namespace)
    twin.abstract = cls.abstract
    return twin


def _async_run(fn: types.FunctionType, where: str) -> types.FunctionType:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise NotTransformable(f"{where}: its source is not available ({exc})") from None
    tree = ast.parse(source)
    definition = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(definition, ast.FunctionDef):
        raise NotTransformable(f"{where} is not written as a def statement (a lambda?)")
    if definition.decorator_list:
        raise NotTransformable(f"{where} is decorated")
    positional = [arg.arg for arg in (*definition.args.posonlyargs, *definition.args.args)]
    if len(positional) < 3:
        raise NotTransformable(f"{where} does not take (self, event, step)")
    awaiter = _Awaiter(positional[2], _declared_step_functions(definition, positional[2]))
    body = [awaiter.visit(statement) for statement in definition.body]
    if awaiter.problems:
        raise NotTransformable(f"{where}: " + "; ".join(awaiter.problems))
    asynchronous = ast.AsyncFunctionDef(
        name=definition.name, args=definition.args, body=body, decorator_list=[],
        returns=definition.returns, type_comment=None, **_TYPE_PARAMS)
    ast.copy_location(asynchronous, definition)
    ast.increment_lineno(asynchronous, fn.__code__.co_firstlineno - 1)
    # Built inside a factory whose parameters are the original's free variables, so the new function
    # closes over the same names, then given the original's very cells.
    freevars = fn.__code__.co_freevars
    factory = ast.FunctionDef(
        name="_twin_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=name) for name in freevars], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[asynchronous, ast.Return(value=ast.Name(id=definition.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None, **_TYPE_PARAMS)
    for node in (factory, *factory.args.args, *factory.body[1:], factory.body[1].value):
        ast.copy_location(node, asynchronous)
    module = ast.Module(body=[factory], type_ignores=[])
    code = compile(module, fn.__code__.co_filename, "exec", flags=fn.__code__.co_flags & _FUTURE_FLAGS,
                   dont_inherit=True)
    factory_code = next(const for const in code.co_consts if isinstance(const, types.CodeType))
    run_code = next(const for const in factory_code.co_consts
                    if isinstance(const, types.CodeType) and const.co_name == definition.name)
    cells = dict(zip(freevars, fn.__closure__ or (), strict=True))
    missing = [name for name in run_code.co_freevars if name not in cells]
    if missing:
        raise NotTransformable(f"{where}: the rewritten run needs free variables the original lacks: "
                               f"{missing}")
    twin = types.FunctionType(run_code, fn.__globals__, fn.__name__, fn.__defaults__,
                              tuple(cells[name] for name in run_code.co_freevars))
    twin.__kwdefaults__ = fn.__kwdefaults__
    twin.__qualname__ = fn.__qualname__
    twin.__module__ = fn.__module__
    twin.__doc__ = fn.__doc__
    twin.__dict__.update(fn.__dict__)
    twin.twin_source = ast.unparse(asynchronous)  # what the twin's run says, to read and to test
    return twin


# Python 3.12's function definitions have type parameters.
_TYPE_PARAMS = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}


def _step_method(node: ast.AST, step: str) -> str | None:
    """``"do"`` for ``step.do``, and so on: the method of run's step parameter that ``node`` names."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == step:
        return node.attr
    return None


def _runs_a_function(call: ast.Call) -> bool:
    """Whether a ``step.do(...)`` call passes the function to run (else it declares one)."""
    return len(call.args) >= 2 or any(keyword.arg == "fn" for keyword in call.keywords)


def _declared_step_functions(run: ast.FunctionDef, step: str) -> set[str]:
    declared = set()
    for node in ast.walk(run):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not run:
            for decorator in node.decorator_list:
                if not isinstance(decorator, ast.Call) or _runs_a_function(decorator):
                    continue
                if _step_method(decorator.func, step) in DECLARING_METHODS:
                    declared.add(node.name)
    return declared


class _Awaiter(ast.NodeTransformer):
    """Puts ``await`` in front of the step calls of run's own body. Nested functions, lambdas and
    classes are left as they are (step bodies), and must not call steps: no await can reach there."""

    def __init__(self, step: str, step_functions: set[str]):
        self.step = step
        self.step_functions = step_functions
        self.problems: list[str] = []

    def visit_Call(self, node: ast.Call):
        method = _step_method(node.func, self.step)
        if method is not None and (method in AWAITED_METHODS or method in DECLARING_METHODS
                                   or method in ANSWERING_METHODS):
            if any(isinstance(arg, ast.Starred) for arg in node.args) or any(
                    keyword.arg is None for keyword in node.keywords):
                self.problems.append(f"line {node.lineno}: step.{method}(*args/**kwargs) cannot be told "
                                     "apart from a declaration")
            node.args = [self.visit(arg) for arg in node.args]
            node.keywords = [self.visit(keyword) for keyword in node.keywords]
            if method in AWAITED_METHODS and (method != "do" or _runs_a_function(node)):
                return ast.copy_location(ast.Await(value=node), node)
            return node
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.step_functions:
            return ast.copy_location(ast.Await(value=node), node)
        return node

    def visit_Name(self, node: ast.Name):
        if node.id == self.step:
            self.problems.append(f"line {node.lineno}: {self.step!r} is used otherwise than to call a step "
                                 f"method on it (handed to code outside run, which no await reaches?)")
        return node

    def visit_GeneratorExp(self, node: ast.GeneratorExp):
        self.generic_visit(node)
        if any(isinstance(inner, ast.Await) for inner in ast.walk(node)):
            self.problems.append(f"line {node.lineno}: a step called in a generator expression (an await "
                                 "there would make it an async generator)")
        return node

    def _nested(self, node, arguments: ast.arguments | None, body: list[ast.AST]):
        # Decorators and defaults are evaluated in run's own scope; the body is not run's.
        for decorator in getattr(node, "decorator_list", []):
            self._visit_declaration(decorator)
        if arguments is not None:
            arguments.defaults = [self.visit(default) for default in arguments.defaults]
            arguments.kw_defaults = [default if default is None else self.visit(default)
                                     for default in arguments.kw_defaults]
            own = {arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                                       *filter(None, (arguments.vararg, arguments.kwarg)))}
        else:
            own = set()
        reaching = ({self.step} | self.step_functions) - own
        for statement in body:
            for inner in ast.walk(statement):
                if isinstance(inner, ast.Name) and inner.id in reaching and isinstance(inner.ctx, ast.Load):
                    self.problems.append(f"line {inner.lineno}: {inner.id!r} is used inside a nested "
                                         "function, lambda or class, where no await reaches")
        return node

    def _visit_declaration(self, decorator: ast.AST) -> None:
        if isinstance(decorator, ast.Call) and _step_method(decorator.func, self.step) in DECLARING_METHODS:
            decorator.args = [self.visit(arg) for arg in decorator.args]
            decorator.keywords = [self.visit(keyword) for keyword in decorator.keywords]
        else:
            self.visit(decorator)

    def visit_FunctionDef(self, node):
        return self._nested(node, node.args, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda):
        return self._nested(node, node.args, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef):
        node.bases = [self.visit(base) for base in node.bases]
        return self._nested(node, None, node.body)


# -- serving the twins -------------------------------------------------------------------------------

@dataclass
class FlavourRecord:
    """What the replays did while a flavour was in use."""

    flavour: str
    async_runs: int = 0
    # Each awaitable an async run's step call returned, and whether run() awaited it.
    awaitables: list = field(default_factory=list)
    # The workflows served as they are in the async flavour, because they have no twin.
    sync_only: dict[str, str] = field(default_factory=dict)

    def unawaited(self) -> list:
        return [awaitable for awaitable in self.awaitables if not awaitable.awaited]


@contextmanager
def use_flavour(flavour: str):
    """In the async flavour, ``registry.get`` answers with each workflow's async twin (a workflow that
    has none, as it is, noted in the record), and the async path counts its runs and which step calls
    were awaited. The sync flavour changes nothing."""
    record = FlavourRecord(flavour)
    if flavour == "sync":
        yield record
        return
    if flavour != "async":
        raise ValueError(f"flavour is one of {FLAVOURS}, got {flavour!r}")
    from django_workflows.engine import async_run
    from django_workflows.shared.definition import registry

    original_get, original_drive = registry.get, async_run.drive
    shadowed = vars(registry).get("get")  # a get set on the registry itself (another patch), if any

    def get(name):
        cls = original_get(name)
        try:
            return async_twin(cls)
        except NotTransformable as exc:
            record.sync_only[name] = str(exc)
            return cls

    def drive(*args, **kwargs):
        record.async_runs += 1
        return original_drive(*args, **kwargs)

    registry.get, async_run.drive = get, drive
    untrack = _track_step_awaitables(async_run, record)
    try:
        yield record
    finally:
        untrack()
        if shadowed is None:
            del registry.get  # the class's method answers again
        else:
            registry.get = shadowed
        async_run.drive = original_drive


def _track_step_awaitables(async_run, record: FlavourRecord):
    """Note in ``record`` each awaitable an async run's step call returns, and whether anything awaited
    it; return what undoes the patch. Two designs of ``async_run`` are known: step calls that return an
    awaitable already holding the step's outcome (``Settled``), and step calls that return a future of
    the replay's own event loop (``EventLoopRun.call``), which run() awaits, gathers or waits for."""
    if hasattr(async_run, "Settled"):
        settled = async_run.Settled

        class TrackedSettled(settled):
            __slots__ = ("awaited",)

            def __init__(self, value):
                super().__init__(value)
                self.awaited = False
                record.awaitables.append(self)

            def __await__(self):
                self.awaited = True
                return settled.__await__(self)

        async_run.Settled = TrackedSettled

        def untrack():
            async_run.Settled = settled

        return untrack

    import asyncio

    loop_run, call = async_run.EventLoopRun, async_run.EventLoopRun.call

    class TrackedFuture(asyncio.Future):
        def __init__(self, *, loop):
            super().__init__(loop=loop)
            self.awaited = False
            record.awaitables.append(self)

        def __await__(self):
            self.awaited = True
            return super().__await__()

        __iter__ = __await__

        def add_done_callback(self, fn, *, context=None):
            self.awaited = True  # awaited by a task, or taken by asyncio.gather, wait or as_completed
            return super().add_done_callback(fn, context=context)

        @property
        def value(self):
            return self.result() if self.done() and not self.cancelled() and not self.exception() else self

    def tracked_call(self, *args, **kwargs):
        loop = self.loop
        loop.create_future = lambda: TrackedFuture(loop=loop)
        try:
            return call(self, *args, **kwargs)
        finally:
            del loop.create_future

    loop_run.call = tracked_call

    def untrack():
        loop_run.call = call

    return untrack


def in_flavour(request):
    """The body of the suites' ``flavour`` fixture (tests/integration/conftest.py and
    tests/conformance/conftest.py): ``"sync"``, or ``"async"``, whose workflows and replays are the async
    twins. A test of the async flavour that ran no ``async def run``, or left a step call un-awaited,
    fails."""
    name = getattr(request, "param", "sync")
    with use_flavour(name) as record:
        yield name
    report = getattr(request.node, "rep_call", None)
    if name != "async" or report is None or not report.passed:
        return
    assert not record.sync_only, (
        f"workflows without an async twin ran in the async flavour: {record.sync_only}; mark the test "
        "one_flavour, saying so")
    assert record.async_runs, ("the async flavour ran no async def run(): mark the test one_flavour if it "
                               "runs no workflow")
    unawaited = record.unawaited()
    assert not unawaited, (f"{len(unawaited)} step call(s) of an async run were not awaited (values "
                           f"{[a.value for a in unawaited][:5]}): the transform missed them")
