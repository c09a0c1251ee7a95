"""The diagram of a workflow, parsed from the source of its run(), and its SVG."""

from xml.etree import ElementTree

import pytest

from django_workflows import WorkflowEntrypoint
from django_workflows.reading.drawing.diagram import render_diagram
from django_workflows.errors import WorkflowNotFound
from django_workflows.reading.outline import Branch, Exit, Loop, Step, Try, diagram_for, parse_workflow_class


def shape(nodes):
    """The tree as plain data, easy to compare: steps as (kind, label), the rest by their parts."""
    out = []
    for node in nodes:
        if isinstance(node, Step):
            out.append((node.kind, node.label))
        elif isinstance(node, Exit):
            out.append((node.kind, node.value))
        elif isinstance(node, Branch):
            out.append((node.kind, [(arm.label, shape(arm.body)) for arm in node.arms], node.has_else))
        elif isinstance(node, Try):
            out.append(
                (
                    "try",
                    shape(node.body),
                    [(arm.label, shape(arm.body)) for arm in node.handlers],
                    shape(node.orelse),
                    shape(node.finalbody),
                )
            )
        elif isinstance(node, Loop):
            out.append((node.kind, node.header, shape(node.body)))
    return out


# The workflows of the test app.


def test_plain_calls_and_the_decorator_form_in_the_order_they_run():
    diagram = diagram_for("three-steps")
    assert shape(diagram.body) == [
        ("do", "a"),
        ("do", "b"),
        ("do", "c"),
        ("return", "{'sum': sum(c), 'b': result, 'params': event.payload}"),
    ]
    decorated = diagram.body[1]
    # The decorated step is drawn where b() is called, not where it is defined.
    assert decorated.lineno == diagram.body[2].lineno - 1
    assert diagram.filename.endswith("tests/testapp/workflows.py")


def test_a_wait_with_its_timeout_inside_try_except():
    diagram = diagram_for("approval")
    assert shape(diagram.body) == [
        ("do", "ask"),
        (
            "try",
            [("wait_for_event", "approval")],
            [("except WorkflowTimeoutError", [("do", "expire"), ("return", "{'status': 'expired'}")])],
            [],
            [],
        ),
        ("return", "{'status': decision.payload['outcome'], 'type': decision.ty…"),
    ]
    wait = diagram.body[1].body[0]
    assert wait.detail == "manager-approval, timeout 72 hours"


def test_a_wait_for_any_of_several_types_and_the_default_timeout():
    [wait, _] = diagram_for("race").body
    assert wait.detail == "payment-success or payment-failure, timeout 4 hours"
    [first, second, _] = diagram_for("two-waits").body
    assert (first.name, second.name) == ("first", "second") and first.detail == "tick, timeout 1 hour"


def test_if_else_with_sleep_and_sleep_until_and_a_returned_step():
    body = diagram_for("sleeper").body
    assert shape(body) == [
        ("do", "before"),
        (
            "if",
            [("if 'until' in event.payload", [("sleep_until", "nap")]), ("else", [("sleep", "nap")])],
            True,
        ),
        ("do", "after"),
        ("return", "the result of after"),
    ]
    assert body[1].arms[1].body[0].detail == "event.payload.get('duration', '1 hour')"


def test_a_loop_and_an_if_without_else():
    assert shape(diagram_for("loop").body) == [
        ("for", "for i in range(event.payload['n'])", [("do", "item")]),
        ("if", [("if event.payload.get('then_sleep')", [("sleep", "rest")])], False),
        ("return", "total"),
    ]


def test_an_elif_chain_is_one_branch_and_computed_names_keep_their_source():
    [branch, _] = diagram_for("bad-call").body
    assert [arm.label for arm in branch.arms] == [
        "if what == 'sleep'",
        "elif what == 'sleep_until'",
        "elif what == 'wait'",
        "elif what == 'wait_timeout'",
        "elif what == 'name'",
        "elif what == 'fn'",
    ]
    assert not branch.has_else
    computed = branch.arms[4].body[0]
    assert computed.name is None and computed.name_source == "event.payload['value']"
    [loop, _] = diagram_for("quick").body
    assert loop.body[0].name is None and loop.body[0].label == "name"


def test_retries_from_a_literal_config_and_try_blocks_without_steps_in_the_handler():
    body = diagram_for("non-retryable").body
    assert shape(body) == [
        ("try", [("do", "charge")], [("except PaymentDeclined", [("do", "compensate")])], [], []),
        ("try", [("do", "refuse")], [("except NonRetryableError", [])], [], []),
        ("return", "outcome"),
    ]
    assert body[0].body[0].detail == "retries 2, delay 1 second"


def test_steps_inside_helpers_passed_as_functions_are_not_steps_of_run():
    # Pausable's first() calls workflows...pause() and terminator's first() terminates: plain code.
    assert shape(diagram_for("pausable").body) == [("do", "first"), ("do", "second"), ("return", "'done'")]
    assert shape(diagram_for("read-only-event").body) == [
        (
            "try",
            [],
            [
                (
                    "except AttributeError",
                    [("return", "{'refused': type(exc).__name__, 'instance_id': event.instan…")],
                )
            ],
            [],
            [],
        ),
        ("return", "'mutable'"),
    ]


def test_every_workflow_of_the_test_app_parses():
    from django_workflows.shared.definition import registry

    names = [cls.name for cls in registry.all() if cls.__module__ == "tests.testapp.workflows"]
    assert len(names) > 20
    for name in names:
        diagram = diagram_for(name)
        assert not diagram.error, name
        assert render_diagram(diagram).startswith("<svg")


def test_an_unknown_workflow():
    with pytest.raises(WorkflowNotFound):
        diagram_for("no-such-workflow")


# Forms the test app does not use. Abstract, so they stay out of the registry.


class Helpers(WorkflowEntrypoint):
    abstract = True

    def run(self, event, s):
        s.do("first", lambda: 1)
        self.notify(s, "done")
        self.not_a_step_helper()

        def local():
            s.sleep("local-nap", 500)

        local()
        s.do("decorated-by-call")(lambda: 2)()
        while event.payload.get("again"):
            if s.do("check", lambda: True):
                break
        match event.payload.get("kind"):
            case "a":
                s.do("kind-a", lambda: 1)
            case _:
                pass
        values = [s.do(f"item-{i}", lambda i=i: i) for i in range(3)]
        with open("/dev/null"):
            s.sleep_until("until", event.payload["when"])
        if not values:
            raise RuntimeError("nothing")
        try:
            total = sum(values)
        finally:
            s.do("cleanup", lambda: None)
        for _ in range(3):
            total += 1  # no step: not drawn
        return s.do("done", lambda: total) if total else None

    def notify(self, step, what):
        step.do("notify", lambda: what)

    def not_a_step_helper(self):
        return 1


class Inherited(Helpers):
    abstract = True


def test_helpers_methods_loops_match_comprehensions_finally_and_conditional_expressions():
    diagram = parse_workflow_class(Helpers)
    assert shape(diagram.body) == [
        ("do", "first"),
        ("do", "notify"),  # self.notify(s, ...) names the step parameter `step` inside the method
        ("sleep", "local-nap"),
        ("do", "decorated-by-call"),
        ("while", "while event.payload.get('again')", [("do", "check")]),
        ("match", [("case 'a'", [("do", "kind-a")]), ("case _", [])], True),
        ("for", "for i in range(3)", [("do", "f'item-{i}'")]),
        ("sleep_until", "until"),
        ("if", [("if not values", [("raise", "RuntimeError('nothing')")])], False),
        ("do", "cleanup"),
        ("if", [("if total", [("do", "done")]), ("else", [])], True),
        ("return", "s.do('done', lambda: total) if total else None"),
    ]
    assert diagram.body[2].detail == "500 ms"
    assert parse_workflow_class(Inherited).body == diagram.body


def test_a_class_whose_source_cannot_be_read_says_so():
    namespace = {}
    exec(
        "from django_workflows import WorkflowEntrypoint\n"
        "class Generated(WorkflowEntrypoint):\n"
        "    abstract = True\n"
        "    def run(self, event, step):\n"
        "        step.do('x', lambda: 1)\n",
        namespace,
    )
    diagram = parse_workflow_class(namespace["Generated"])
    assert diagram.body == [] and "not available" in diagram.error


class LongConditions(WorkflowEntrypoint):
    abstract = True

    def run(self, event, step):
        order = step.do("load-order", lambda: event.payload)
        if (
            order.get("amount", 0) > 10_000
            and order.get("currency") not in ("EUR", "USD")
            and not order.get("trusted_customer")
        ):
            step.wait_for_event("review", "manager-approval", timeout="1 day")
        while order.get("attempts", 0) < 3 and not order.get("shipped") and event.payload.get("retry"):
            step.do("ship", lambda: True)


def test_long_conditions_are_kept_whole():
    [_, branch, loop] = parse_workflow_class(LongConditions).body
    assert branch.arms[0].label == (
        "if order.get('amount', 0) > 10000 and order.get('currency') not in ('EUR', 'USD') "
        "and (not order.get('trusted_customer'))"
    )
    assert loop.header == (
        "while order.get('attempts', 0) < 3 and (not order.get('shipped')) and event.payload.get('retry')"
    )


# The SVG.


SVG = "{http://www.w3.org/2000/svg}"


def tags(svg, css_class):
    """The groups of the drawing with this class: (title, rect, [lines of text])."""
    found = []
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        if css_class in group.get("class", "").split():
            rect = group.find(f"{SVG}rect")
            box = {key: float(rect.get(key)) for key in ("x", "y", "width", "height")}
            found.append((group.findtext(f"{SVG}title"), box, [t.text for t in group.iter(f"{SVG}text")]))
    return found


def test_a_long_condition_wraps_over_lines_inside_its_tag_and_the_arm_starts_below_it():
    diagram = parse_workflow_class(LongConditions)
    svg = render_diagram(diagram)
    [(title, box, lines)] = [tag for tag in tags(svg, "dw-label") if tag[0].startswith("if ")]
    assert title == diagram.body[1].arms[0].label
    assert len(lines) > 1 and " ".join(lines) == title  # every word, in order, none cut off
    assert not any("…" in line for line in lines)
    # Each line fits the tag (at the label font's width per character), and the tag grows to hold them.
    assert all(len(line) * 6.2 <= box["width"] - 10 for line in lines)
    assert box["height"] >= 13 * len(lines)
    [(_, loop_box, loop_lines)] = tags(svg, "dw-loop")
    assert len(loop_lines) > 1 and " ".join(loop_lines) == "↻ " + diagram.body[2].header
    assert loop_box["height"] >= 13 * len(loop_lines)
    # The arm's wait is drawn below the wrapped condition, not over it.
    [(_, review, _)] = [tag for tag in tags(svg, "dw-node") if "review" in tag[0]]
    assert review["y"] > box["y"] + box["height"]


def test_the_svg_marks_steps_done_failed_and_in_progress():
    svg = render_diagram(diagram_for("approval"), {"ask": {"succeeded": 1}}, current_step="approval")
    assert svg.count("dw-state-done") == 1
    assert svg.count("dw-state-current") == 1
    assert svg.count("dw-state-pending") == 1  # expire
    loop = render_diagram(diagram_for("loop"), {"item": {"succeeded": 120}, "rest": {"failed": 1}})
    assert "×120" in loop and "dw-state-failed" in loop
    plain = render_diagram(diagram_for("approval"))
    assert "dw-state-" not in plain


def test_the_svg_draws_every_part_of_the_tree():
    svg = render_diagram(parse_workflow_class(Helpers))
    for text in (
        "run(event, step)",
        "notify",
        "local-nap",
        "while event.payload.get(",
        "case &#x27;a&#x27;",
        "f&#x27;item-{i}&#x27;",
        "raise RuntimeError(",
        "dw-loop",
        "dw-decision",
    ):
        assert text in svg, text
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    # A workflow that always returns has no end node; one that can fall off the end has one.
    assert ">end<" not in render_diagram(diagram_for("approval"))
    assert ">end<" in render_diagram(parse_workflow_class(FallsThrough))


class FallsThrough(WorkflowEntrypoint):
    abstract = True

    def run(self, event, step):
        step.do("<script>alert(1)</script>", lambda: 1)


def test_names_from_the_source_are_escaped():
    svg = render_diagram(parse_workflow_class(FallsThrough))
    assert "<script>" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg
