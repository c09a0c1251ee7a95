"""Draws a ``django_workflows.reading.outline.Diagram`` as a top-to-bottom flow chart in SVG.

Each node of the tree becomes a block that knows its size; a block draws itself at a position, with
control entering at the middle of its top edge and leaving at the middle of its bottom edge (unless
it always returns or raises). Steps are marked with the progress of an instance when one is given:
``{step name: {journal status: count}}``, and the name of the step the instance is on.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from django_workflows.reading.drawing.svg import ARROW_DEFS, CHAR_WIDTH, Canvas, Drawing, fit
from django_workflows.reading.outline import Branch, Diagram, Exit, Loop, Step, Try

STEP_W, STEP_H = 230, 48
EXIT_W, EXIT_H = 210, 30
LABEL_H = 20
LABEL_LINE = 13  # each further line of a wrapped label or loop header
LABEL_CHAR = 6.2
LOOP_CHAR = 6.4
LOOP_TAG_W = 380
GAP = 22
COLUMN_GAP = 26
LOOP_PAD = 18
MARGIN = 18

KIND_CAPTION = {
    "do": "step.do",
    "sleep": "step.sleep",
    "sleep_until": "step.sleep_until",
    "wait_for_event": "step.wait_for_event",
}
STATE_TEXT = {"done": "done", "failed": "failed", "current": "in progress", "pending": "not reached"}


def wrap(text: str, width: float, char_width: float) -> list[str]:
    """``text`` over as many lines of about ``width`` pixels as it takes: a condition is read whole,
    never cut short. Lines break between words where they can (code has spaces around operators)."""
    columns = max(8, int(width / char_width))
    return textwrap.wrap(text, columns, break_long_words=True, break_on_hyphens=False) or [""]


def _lines(canvas: Canvas, x: float, y: float, lines: list[str], css: str) -> None:
    for number, line in enumerate(lines):
        canvas.text(x, y + number * LABEL_LINE, line, text_anchor="middle", class_=css)


def _connector(canvas: Canvas, x1, y1, x2, y2, *, dashed=False, arrow=True):
    canvas.line(
        x1,
        y1,
        x2,
        y2,
        class_="dw-edge" + (" dw-edge-error" if dashed else ""),
        marker_end="url(#dw-arrow)" if arrow and y2 - y1 > 6 else None,
    )


class Block:
    width: float = 0
    height: float = 0
    ends = False
    """Control never leaves through the bottom: the block always returns or raises."""

    def draw(self, canvas: Canvas, x: float, y: float) -> None:
        raise NotImplementedError


class Progress:
    def __init__(self, counts: dict[str, dict[str, int]] | None, current: str | None):
        self.counts = counts
        self.current = current

    def state(self, step: Step) -> tuple[str, int]:
        """The state of a node, and how many journal rows are done for it (loops make several)."""
        if self.counts is None or step.name is None:
            return "", 0
        statuses = self.counts.get(step.name, {})
        done = statuses.get("succeeded", 0)
        if step.name == self.current:
            return "current", done
        if done:
            return "done", done
        if statuses.get("failed"):
            return "failed", 0
        return "pending", 0


class StepBlock(Block):
    width, height = STEP_W, STEP_H

    def __init__(self, step: Step, progress: Progress):
        self.step = step
        self.state, self.done = progress.state(step)

    def draw(self, canvas, x, y):
        step = self.step
        classes = f"dw-node dw-kind-{step.kind.replace('_', '-')}" + (
            f" dw-state-{self.state}" if self.state else ""
        )
        title = f"{KIND_CAPTION[step.kind]}({step.label!r})" + (f" · {step.detail}" if step.detail else "")
        title += f" · line {step.lineno}" if step.lineno else ""
        if self.state:
            title += f" · {STATE_TEXT[self.state]}" + (f" ({self.done}×)" if self.done > 1 else "")
        canvas.open("g", class_=classes, title=title)
        canvas.rect(x, y, STEP_W, STEP_H, rx=9, class_="dw-node-box")
        canvas.rect(x, y, 6, STEP_H, rx=3, class_="dw-node-stripe")
        caption = KIND_CAPTION[step.kind] + (f" · {step.detail}" if step.detail else "")
        canvas.text(x + 16, y + 18, fit(caption, STEP_W - 50, 5.6), class_="dw-node-caption")
        name = step.name if step.name is not None else step.name_source
        canvas.text(
            x + 16,
            y + 37,
            fit(name, STEP_W - 56, 7.4),
            class_="dw-node-name" + ("" if step.name is not None else " dw-node-computed"),
        )
        if self.state in ("done", "failed", "current"):
            cx, cy = x + STEP_W - 20, y + STEP_H / 2
            canvas.element("circle", cx=cx, cy=cy, r=10, class_="dw-mark")
            glyph = {"done": "✓", "failed": "✕", "current": "…"}[self.state]
            canvas.text(cx, cy + 4.5, glyph, class_="dw-mark-glyph", text_anchor="middle")
            if self.done > 1:
                canvas.text(cx - 14, cy + 4, f"×{self.done}", class_="dw-mark-count", text_anchor="end")
        canvas.close("g")


class ExitBlock(Block):
    width, height = EXIT_W, EXIT_H
    ends = True

    def __init__(self, node: Exit):
        self.node = node

    def draw(self, canvas, x, y):
        node = self.node
        text = f"{node.kind} {node.value}".strip()
        canvas.open(
            "g",
            class_=f"dw-exit dw-exit-{node.kind}",
            title=text + (f" · line {node.lineno}" if node.lineno else ""),
        )
        canvas.rect(x, y, EXIT_W, EXIT_H, rx=EXIT_H / 2, class_="dw-exit-box")
        canvas.text(
            x + EXIT_W / 2, y + 19.5, fit(text, EXIT_W - 24), text_anchor="middle", class_="dw-exit-text"
        )
        canvas.close("g")


class TerminalBlock(Block):
    """The start and the end of ``run()``."""

    height = 28

    def __init__(self, text: str, css: str):
        self.text, self.css = text, css
        self.width = max(96, len(text) * CHAR_WIDTH + 28)

    def draw(self, canvas, x, y):
        canvas.rect(x, y, self.width, self.height, rx=14, class_=f"dw-terminal {self.css}")
        canvas.text(x + self.width / 2, y + 18.5, self.text, text_anchor="middle", class_="dw-terminal-text")


class LabelBlock(Block):
    """A tag in a column marking where a part of a statement starts: the condition of an arm
    ("if amount > 100", "except KeyError"), "else", "finally". A long one wraps over lines."""

    def __init__(self, text: str, css: str = ""):
        self.text, self.css = text, css
        self.lines = wrap(text, STEP_W - 18, LABEL_CHAR) if text else []
        self.width = max(len(line) for line in self.lines) * LABEL_CHAR + 18 if text else 0
        self.height = LABEL_H + LABEL_LINE * max(0, len(self.lines) - 1)

    def draw(self, canvas, x, y):
        canvas.open("g", class_=f"dw-label {self.css}".strip(), title=self.text)
        canvas.rect(x, y, self.width, self.height, rx=LABEL_H / 2, class_="dw-label-box")
        _lines(canvas, x + self.width / 2, y + 14, self.lines, "dw-label-text")
        canvas.close("g")


class SequenceBlock(Block):
    def __init__(self, blocks: list[Block]):
        self.blocks = blocks
        self.width = max([block.width for block in blocks] or [40])
        self.height = sum(block.height for block in blocks) + GAP * max(0, len(blocks) - 1)
        self.ends = any(block.ends for block in blocks)

    def draw(self, canvas, x, y):
        center = x + self.width / 2
        previous_bottom, previous_ends = None, False
        for block in self.blocks:
            if previous_bottom is not None:
                if not previous_ends:
                    _connector(canvas, center, previous_bottom, center, y)
            block.draw(canvas, center - block.width / 2, y)
            previous_bottom, previous_ends = y + block.height, previous_ends or block.ends
            y += block.height + GAP


class ColumnsBlock(Block):
    """Columns side by side under a head: the arms of a branch, or a try and its handlers.
    Each column has a label tag; ``error_columns`` are entered by a dashed line (an exception)."""

    HEAD = 26
    SPLIT = 14  # from the head down to the line that splits into columns

    def __init__(
        self,
        head: str,
        head_title: str,
        columns: Sequence[tuple[str, Block]],
        *,
        error_from: int | None = None,
        diamond: bool = False,
        css: str = "",
    ):
        self.head, self.head_title, self.columns = head, head_title, columns
        self.error_from, self.diamond, self.css = error_from, diamond, css
        self.labels = [
            LabelBlock(text, "dw-label-error" if error_from is not None and i >= error_from else "")
            for i, (text, _) in enumerate(columns)
        ]
        self.column_widths = [
            max(block.width, label.width, 70) for (_, block), label in zip(columns, self.labels, strict=True)
        ]
        self.head_width = len(head) * CHAR_WIDTH + 26
        self.width = max(sum(self.column_widths) + COLUMN_GAP * (len(columns) - 1), self.head_width)
        body = max(block.height for _, block in columns)
        # The columns' bodies start level, under the tallest label.
        self.label_height = max(label.height for label in self.labels)
        self.height = self.HEAD + self.SPLIT + 12 + self.label_height + 10 + body + 18 + 12
        self.ends = all(block.ends for _, block in columns)

    def draw(self, canvas, x, y):
        center = x + self.width / 2
        if self.diamond:
            half = self.HEAD / 2
            canvas.path(
                f"M{center},{y} L{center + half},{y + half} "
                f"L{center},{y + self.HEAD} L{center - half},{y + half} Z",
                class_="dw-decision",
                title=self.head_title,
            )
        else:
            canvas.open("g", title=self.head_title)
            canvas.rect(
                center - self.head_width / 2,
                y,
                self.head_width,
                self.HEAD,
                rx=6,
                class_=f"dw-head {self.css}",
            )
            canvas.text(center, y + 17, self.head, text_anchor="middle", class_="dw-head-text")
            canvas.close("g")
        split_y = y + self.HEAD + self.SPLIT
        canvas.line(center, y + self.HEAD, center, split_y, class_="dw-edge")
        total = sum(self.column_widths) + COLUMN_GAP * (len(self.columns) - 1)
        left = x + (self.width - total) / 2
        centers = []
        for width in self.column_widths:
            centers.append(left + width / 2)
            left += width + COLUMN_GAP
        label_y = split_y + 12
        body_y = label_y + self.label_height + 10
        merge_y = y + self.height - 12
        plain = [c for i, c in enumerate(centers) if self.error_from is None or i < self.error_from]
        canvas.line(min(plain + [center]), split_y, max(plain + [center]), split_y, class_="dw-edge")
        merging = []
        for i, ((_, block), label, column_center) in enumerate(
            zip(self.columns, self.labels, centers, strict=True)
        ):
            error = self.error_from is not None and i >= self.error_from
            if error:
                # An exception leaves the try block sideways, from wherever it was raised.
                canvas.path(
                    f"M{center},{split_y} L{column_center},{split_y} L{column_center},{label_y}",
                    class_="dw-edge dw-edge-error",
                    fill="none",
                )
            else:
                canvas.line(column_center, split_y, column_center, label_y, class_="dw-edge")
            if label.text:
                label.draw(canvas, column_center - label.width / 2, label_y)
                label_bottom = label_y + label.height
            else:
                label_bottom = label_y + self.label_height
                canvas.line(column_center, label_y, column_center, label_bottom, class_="dw-edge")
            block_top = body_y
            if block.height:
                _connector(canvas, column_center, label_bottom, column_center, block_top)
                block.draw(canvas, column_center - block.width / 2, block_top)
            if not block.ends:
                bottom = block_top + block.height if block.height else label_bottom
                canvas.line(column_center, bottom, column_center, merge_y, class_="dw-edge")
                merging.append(column_center)
        if merging:
            canvas.line(min(merging + [center]), merge_y, max(merging + [center]), merge_y, class_="dw-edge")
            canvas.line(center, merge_y, center, y + self.height, class_="dw-edge")


class LoopBlock(Block):
    """A dashed box around the body, entered through a tag with the loop's header, with the way back
    to the top for the next iteration along its left side."""

    def __init__(self, loop: Loop, body: Block):
        self.loop, self.body = loop, body
        self.header = "↻ " + loop.header
        self.lines = wrap(self.header, LOOP_TAG_W - 20, LOOP_CHAR)
        self.tag_width = max(len(line) for line in self.lines) * LOOP_CHAR + 20
        self.tag_height = LABEL_H + LABEL_LINE * (len(self.lines) - 1)
        self.width = max(body.width, self.tag_width) + 2 * LOOP_PAD + 14
        self.height = 8 + self.tag_height + 14 + body.height + 22

    def draw(self, canvas, x, y):
        center = x + self.width / 2
        canvas.rect(x, y, self.width, self.height, rx=12, class_="dw-loop-box")
        tag_top = y + 8
        canvas.line(center, y, center, tag_top, class_="dw-edge")
        canvas.open("g", class_="dw-loop", title=f"{self.loop.header} · line {self.loop.lineno}")
        canvas.rect(
            center - self.tag_width / 2,
            tag_top,
            self.tag_width,
            self.tag_height,
            rx=LABEL_H / 2,
            class_="dw-loop-tag",
        )
        _lines(canvas, center, tag_top + 14, self.lines, "dw-loop-text")
        canvas.close("g")
        body_top = tag_top + self.tag_height + 14
        _connector(canvas, center, tag_top + self.tag_height, center, body_top)
        self.body.draw(canvas, center - self.body.width / 2, body_top)
        bottom = body_top + self.body.height
        if not self.body.ends:
            side = x + 12
            back_to = tag_top + self.tag_height + 6
            canvas.path(
                f"M{center},{bottom} L{center},{bottom + 10} L{side},{bottom + 10} L{side},{back_to} "
                f"L{center - 8},{back_to}",
                class_="dw-edge dw-edge-back",
                fill="none",
                marker_end="url(#dw-arrow)",
                title="next iteration",
            )
        canvas.line(center, bottom + 10, center, y + self.height, class_="dw-edge")


def build(nodes, progress: Progress) -> SequenceBlock:
    blocks: list[Block] = []
    for node in nodes:
        if isinstance(node, Step):
            blocks.append(StepBlock(node, progress))
        elif isinstance(node, Exit):
            blocks.append(ExitBlock(node))
        elif isinstance(node, Loop):
            blocks.append(LoopBlock(node, build(node.body, progress)))
        elif isinstance(node, Branch):
            columns = [(arm.label, build(arm.body, progress)) for arm in node.arms]
            if not node.has_else:
                columns.append(("else" if node.kind == "if" else "no case", SequenceBlock([])))
            title = " / ".join(arm.label for arm in node.arms) + f" · line {node.lineno}"
            blocks.append(ColumnsBlock(node.kind, title, columns, diamond=True))
        elif isinstance(node, Try):
            body = build(node.body, progress)
            if node.orelse:
                body = SequenceBlock([body, LabelBlock("else: no exception"), build(node.orelse, progress)])
            # The try column needs no tag of its own: the head above it says "try".
            columns = [("", body)] + [(arm.label, build(arm.body, progress)) for arm in node.handlers]
            blocks.append(
                ColumnsBlock("try", f"try · line {node.lineno}", columns, error_from=1, css="dw-head-try")
            )
            if node.finalbody:
                blocks.append(LabelBlock("finally", "dw-label-finally"))
                blocks.append(build(node.finalbody, progress))
    return SequenceBlock(blocks)


def render_diagram(
    diagram: Diagram, progress: dict[str, dict[str, int]] | None = None, current_step: str | None = None
) -> Drawing:
    """The diagram as an ``<svg>``. With ``progress`` (journal rows per step name and status) the steps
    are marked done, failed, in progress (``current_step``, a name) or not reached."""
    marks = Progress(progress, current_step)
    body = build(diagram.body, marks)
    blocks: list[Block] = [TerminalBlock("run(event, step)", "dw-start"), *body.blocks]
    if not body.ends:
        blocks.append(TerminalBlock("end", "dw-end"))
    root = SequenceBlock(blocks)
    canvas = Canvas()
    root.draw(canvas, MARGIN, MARGIN)
    return canvas.render(
        root.width + 2 * MARGIN,
        root.height + 2 * MARGIN,
        css_class="dw-diagram",
        label=f"Diagram of workflow {diagram.workflow}",
        defs=ARROW_DEFS,
    )
