"""The timeline's dimensions and the marks every row draws with: a bar, a diamond."""

from __future__ import annotations

from django_workflows.reading.drawing.svg import Canvas

LABEL_WIDTH = 270
PLOT_WIDTH = 790
RIGHT_MARGIN = 40
WIDTH = LABEL_WIDTH + PLOT_WIDTH + RIGHT_MARGIN
AXIS_HEIGHT = 38
ROW_HEIGHT = 28
BAR_HEIGHT = 12
# A wait's row grows by a line when the label of the event that ended it has no room beside the bar.
LABEL_LINE = 14
EVENT_LANE = 46
# A step.patched marker is not a step: a thin row, a tick where run() took the patched code.
PATCH_ROW_HEIGHT = 16
# The journal rows that are markers, not steps (models.MARKER_KINDS), drawn as thin rows.
MARKER_TYPES = ("patch", "tags", "progress")
MIN_BAR = 4


def bar(canvas: Canvas, x1: float, x2: float, y: float, css: str, title: str, height: float = BAR_HEIGHT) -> None:
    """A bar from ``x1`` to ``x2`` centred on ``y``, never thinner than ``MIN_BAR`` so that an instant shows."""
    canvas.rect(x1, y - height / 2, max(x2 - x1, MIN_BAR), height, rx=3, class_=css, title=title)


def diamond(canvas: Canvas, cx: float, cy: float, css: str, title: str, size: float = 6) -> None:
    canvas.path(
        f"M{cx:.1f},{cy - size:.1f} L{cx + size:.1f},{cy:.1f} L{cx:.1f},{cy + size:.1f} "
        f"L{cx - size:.1f},{cy:.1f} Z",
        class_=css,
        title=title,
    )
