"""A small SVG writer that escapes every text and attribute it is given."""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString

# Without font metrics on the server, text is measured at about this many pixels per character of a
# 12px sans-serif font; labels are shortened to fit, with the whole text in a tooltip.
CHAR_WIDTH = 6.6


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return str(value)


def _attributes(attrs: dict) -> str:
    parts = []
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(f'{name}="{escape(_number(value) if isinstance(value, (int, float)) else value)}"')
    return (" " + " ".join(parts)) if parts else ""


def fit(text: str, width: float, char_width: float = CHAR_WIDTH) -> str:
    """``text`` shortened with an ellipsis to about ``width`` pixels."""
    limit = max(1, int(width / char_width))
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


class Drawing(SafeString):
    """The markup of an ``<svg>``, knowing its size (the page lays out a narrow drawing differently)."""

    width: float = 0
    height: float = 0


class Canvas:
    def __init__(self):
        self.parts: list[str] = []

    def element(self, tag: str, text: str | None = None, *, title: str | None = None, **attrs) -> None:
        inner = (f"<title>{escape(title)}</title>" if title else "") + (
            escape(text) if text is not None else ""
        )
        if inner:
            self.parts.append(f"<{tag}{_attributes(attrs)}>{inner}</{tag}>")
        else:
            self.parts.append(f"<{tag}{_attributes(attrs)}/>")

    def open(self, tag: str, *, title: str | None = None, **attrs) -> None:
        self.parts.append(
            f"<{tag}{_attributes(attrs)}>" + (f"<title>{escape(title)}</title>" if title else "")
        )

    def close(self, tag: str) -> None:
        self.parts.append(f"</{tag}>")

    def rect(self, x, y, width, height, **attrs) -> None:
        self.element("rect", x=x, y=y, width=max(width, 0), height=max(height, 0), **attrs)

    def line(self, x1, y1, x2, y2, **attrs) -> None:
        self.element("line", x1=x1, y1=y1, x2=x2, y2=y2, **attrs)

    def text(self, x, y, text: str, **attrs) -> None:
        self.element("text", text, x=x, y=y, **attrs)

    def path(self, d: str, **attrs) -> None:
        self.element("path", d=d, **attrs)

    def render(self, width, height, *, css_class: str, label: str, defs: str = "") -> Drawing:
        attributes = _attributes({"class": css_class, "width": width, "height": height, "aria_label": label})
        view_box = f"0 0 {_number(width)} {_number(height)}"
        head = f'<svg xmlns="http://www.w3.org/2000/svg"{attributes} viewBox="{view_box}" role="img">'

        # Every part was built from escaped text and attributes.
        drawing = Drawing(head + defs + "".join(self.parts) + "</svg>")
        drawing.width, drawing.height = width, height
        return drawing


ARROW_DEFS = (
    '<defs><marker id="dw-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
    'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="dw-arrowhead"/></marker></defs>'
)
