"""An ACP registry icon as an avatar (docs/configuration.md "Agents from the registry"): pure.

The registry's icons are small one-colour SVGs (`fill="currentColor"`): shapes made of `<path>`,
`<rect>`, `<circle>` and `<ellipse>` in a `viewBox`. Matrix clients do not show SVG avatars, so the
icon is drawn here into a PNG — in the puppet's own colour, on the light background of the
generated avatars — by a renderer for exactly that subset: paths (every command, arcs too) with
their fill rule, flattened into polygons and filled with 4×4 samples a pixel. Anything else
(a transform, a stroke, a gradient, text, an image) raises ValueError: the caller then uses the
generated avatar. Tested in tests/unit/matrix/test_svg_icon.py.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator

ICON_BYTES = 64 * 1024  # an icon larger than this is refused
SAMPLES = 4  # samples a pixel, each way
CURVE_STEPS = 12  # segments a Bézier curve is cut into
SHAPES = {"path", "rect", "circle", "ellipse"}
CONTAINERS = {"svg", "g", "title", "desc", "metadata"}
SKIPPED = {"defs", "clipPath", "mask"}  # drawn only through references, which are refused

Point = tuple[float, float]
Polygon = list[Point]


def render(
    svg: bytes, size: int, margin: int, colour: tuple[int, int, int], background: tuple[int, int, int]
) -> Callable[[int, int], tuple[int, int, int]]:
    """`pixel(x, y)` → (r, g, b) of the icon drawn in `colour` on `background`, in the square of
    `size` less `margin` on each side (for avatars.png). ValueError when it cannot be drawn."""
    shapes, box = parse(svg)
    inner = size - 2 * margin
    scale = inner / max(box[2], box[3])
    dx = margin + (inner - box[2] * scale) / 2 - box[0] * scale
    dy = margin + (inner - box[3] * scale) / 2 - box[1] * scale
    placed = [([[(x * scale + dx, y * scale + dy) for x, y in ring] for ring in rings], rule) for rings, rule in shapes]
    cover = coverage(placed, size, size)

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        part = cover[y][x]
        red, green, blue = (round(c * part + b * (1 - part)) for c, b in zip(colour, background, strict=True))
        return red, green, blue

    return pixel


def parse(svg: bytes) -> tuple[list[tuple[list[Polygon], str]], tuple[float, float, float, float]]:
    """The filled shapes (their rings, "nonzero" or "evenodd") and the viewBox (x, y, w, h)."""
    if len(svg) > ICON_BYTES:
        raise ValueError("icon too large")
    try:
        root = ET.fromstring(svg)
    except ET.ParseError as exc:
        raise ValueError(f"not XML: {exc}") from None
    if _tag(root) != "svg":
        raise ValueError("not an SVG")
    box = _view_box(root)
    shapes = [(rings, rule) for element in _drawn(root) if (rings := _rings(element)) for rule in [_rule(element)]]
    if not shapes:
        raise ValueError("nothing to draw")
    return shapes, box


def _tag(element: ET.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def _view_box(root: ET.Element) -> tuple[float, float, float, float]:
    text = root.get("viewBox")
    if text:
        numbers = [float(n) for n in re.split(r"[\s,]+", text.strip())]
    else:
        numbers = [0.0, 0.0, _length(root.get("width")), _length(root.get("height"))]
    if len(numbers) != 4 or numbers[2] <= 0 or numbers[3] <= 0:
        raise ValueError("no usable viewBox")
    return numbers[0], numbers[1], numbers[2], numbers[3]


def _length(text: str | None) -> float:
    match = re.fullmatch(r"\s*([0-9.]+)(px)?\s*", text or "")
    if not match:
        raise ValueError("no viewBox and no width/height in pixels")
    return float(match.group(1))


def _drawn(element: ET.Element) -> Iterator[ET.Element]:
    """The shapes to fill, in order; refused: what this renderer cannot draw as the icon shows it."""
    for child in element:
        tag = _tag(child)
        if tag in SKIPPED:
            continue
        style = _style(child)
        for name in ("transform", "clip-path", "mask", "filter"):
            if child.get(name) or name in style:
                raise ValueError(f"{tag} has a {name}")
        stroke = child.get("stroke") or style.get("stroke")
        if stroke and stroke != "none":
            raise ValueError(f"{tag} has a stroke")
        fill = child.get("fill") or style.get("fill") or ""
        if fill.startswith("url("):
            raise ValueError(f"{tag} is filled with a paint server")
        if tag in CONTAINERS:
            yield from _drawn(child)
        elif tag in SHAPES:
            if fill != "none":
                yield child
        else:
            raise ValueError(f"cannot draw <{tag}>")


def _style(element: ET.Element) -> dict[str, str]:
    pairs = (item.split(":", 1) for item in (element.get("style") or "").split(";") if ":" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def _rule(element: ET.Element) -> str:
    rule = element.get("fill-rule") or _style(element).get("fill-rule") or "nonzero"
    return "evenodd" if rule == "evenodd" else "nonzero"


def _number(element: ET.Element, name: str) -> float:
    return _length(element.get(name) or "0")


def _rings(element: ET.Element) -> list[Polygon]:
    tag = _tag(element)
    if tag == "path":
        return path_rings(element.get("d") or "")
    if tag == "rect":
        x, y, w, h = (_number(element, n) for n in ("x", "y", "width", "height"))
        return [[(x, y), (x + w, y), (x + w, y + h), (x, y + h)]] if w > 0 and h > 0 else []
    cx, cy = _number(element, "cx"), _number(element, "cy")
    rx = _number(element, "r" if tag == "circle" else "rx")
    ry = rx if tag == "circle" else _number(element, "ry")
    steps = 48
    return [
        [
            (cx + rx * math.cos(2 * math.pi * i / steps), cy + ry * math.sin(2 * math.pi * i / steps))
            for i in range(steps)
        ]
    ]


_TOKEN = re.compile(r"\s*,?\s*([MmZzLlHhVvCcSsQqTtAa]|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_FLAG = re.compile(r"\s*,?\s*([01])")
_ARITY = {"M": 2, "L": 2, "H": 1, "V": 1, "C": 6, "S": 4, "Q": 4, "T": 2, "A": 7, "Z": 0}


def path_tokens(d: str) -> Iterator[tuple[str, list[float]]]:
    """(command, its numbers) for each segment of path data, a repeated command spelt out
    (numbers after M are L's); arc flags may stand without separators ("a1 1 0 011 1")."""
    at, command = 0, ""
    d = d.strip()
    while at < len(d):
        match = _TOKEN.match(d, at)
        if not match:
            raise ValueError(f"bad path data at {at}")
        if match.group(1).isalpha():
            command, at = match.group(1), match.end()
            if command in "Zz":
                yield command, []
                continue
        elif not command or command in "Zz":
            raise ValueError("a number without a command")
        numbers, at = _arguments(d, at, command)
        yield command, numbers
        command = {"M": "L", "m": "l"}.get(command, command)


def _arguments(d: str, at: int, command: str) -> tuple[list[float], int]:
    numbers: list[float] = []
    for index in range(_ARITY[command.upper()]):
        pattern = _FLAG if command in "Aa" and index in (3, 4) else _TOKEN
        match = pattern.match(d, at)
        if not match or match.group(1).isalpha():
            raise ValueError(f"{command} needs {_ARITY[command.upper()]} numbers")
        numbers.append(float(match.group(1)))
        at = match.end()
    return numbers, at


def path_rings(d: str) -> list[Polygon]:
    """The closed polygons path data `d` outlines (every subpath, closed or not, is filled)."""
    rings: list[Polygon] = []
    ring: Polygon = []
    x = y = start_x = start_y = 0.0
    last_control: Point | None = None
    last_command = ""
    for command, numbers in path_tokens(d):
        upper, relative = command.upper(), command.islower()
        ox, oy = (x, y) if relative else (0.0, 0.0)
        if upper == "M":
            if len(ring) > 1:
                rings.append(ring)
            x, y = numbers[0] + ox, numbers[1] + oy
            start_x, start_y, ring = x, y, [(x, y)]
        elif upper == "Z":
            if len(ring) > 1:
                rings.append(ring)
            x, y, ring = start_x, start_y, [(start_x, start_y)]
        else:
            x, y, last_control = _segment(ring, upper, numbers, (x, y), (ox, oy), last_control, last_command)
        if upper not in "CSQT":
            last_control = None
        last_command = upper
    if len(ring) > 1:
        rings.append(ring)
    return rings


def _segment(ring: Polygon, upper: str, n: list[float], at: Point, origin: Point, control: Point | None, last: str):
    """Add one drawing command's points to `ring`: (x, y, the control point a smooth curve reflects)."""
    x, y = at
    ox, oy = origin
    if upper == "L" or upper == "T" and not control:
        ring.append((n[0] + ox, n[1] + oy))
        return n[0] + ox, n[1] + oy, None
    if upper in "HV":
        x, y = (n[0] + ox, y) if upper == "H" else (x, n[0] + oy)
        ring.append((x, y))
        return x, y, None
    if upper == "A":
        end = (n[5] + ox, n[6] + oy)
        ring.extend(arc_points(at, n[0], n[1], n[2], bool(n[3]), bool(n[4]), end))
        return end[0], end[1], None
    smooth = control if control and last in ("CS" if upper in "CS" else "QT") else None
    reflected = (2 * x - smooth[0], 2 * y - smooth[1]) if smooth else (x, y)
    if upper == "C":
        points = [(n[0] + ox, n[1] + oy), (n[2] + ox, n[3] + oy), (n[4] + ox, n[5] + oy)]
    elif upper == "S":
        points = [reflected, (n[0] + ox, n[1] + oy), (n[2] + ox, n[3] + oy)]
    elif upper == "Q":
        points = [(n[0] + ox, n[1] + oy), (n[2] + ox, n[3] + oy)]
    else:  # T
        points = [reflected, (n[0] + ox, n[1] + oy)]
    ring.extend(_bezier([at, *points]))
    return points[-1][0], points[-1][1], points[-2]


def _bezier(points: list[Point]) -> list[Point]:
    """Points along the Bézier curve through control `points` (its start excluded)."""
    out = []
    for step in range(1, CURVE_STEPS + 1):
        t, level = step / CURVE_STEPS, points
        while len(level) > 1:
            level = [(a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t) for a, b in zip(level, level[1:])]
        out.append(level[0])
    return out


def arc_points(start: Point, rx: float, ry: float, angle: float, large: bool, sweep: bool, end: Point) -> list[Point]:
    """Points along an SVG elliptical arc (SVG 1.1 appendix F.6), its start excluded."""
    (x1, y1), (x2, y2) = start, end
    rx, ry = abs(rx), abs(ry)
    if not rx or not ry or start == end:
        return [end]
    phi = math.radians(angle)
    cos, sin = math.cos(phi), math.sin(phi)
    dx, dy = (x1 - x2) / 2, (y1 - y2) / 2
    px, py = cos * dx + sin * dy, -sin * dx + cos * dy
    grow = px * px / (rx * rx) + py * py / (ry * ry)
    if grow > 1:
        rx, ry = rx * math.sqrt(grow), ry * math.sqrt(grow)
    num = rx * rx * ry * ry - rx * rx * py * py - ry * ry * px * px
    root = math.sqrt(max(num, 0) / (rx * rx * py * py + ry * ry * px * px))
    root = -root if large == sweep else root
    cx_, cy_ = root * rx * py / ry, -root * ry * px / rx
    cx, cy = cos * cx_ - sin * cy_ + (x1 + x2) / 2, sin * cx_ + cos * cy_ + (y1 + y2) / 2
    first = math.atan2((py - cy_) / ry, (px - cx_) / rx)
    turn = math.atan2((-py - cy_) / ry, (-px - cx_) / rx) - first
    if sweep and turn < 0:
        turn += 2 * math.pi
    elif not sweep and turn > 0:
        turn -= 2 * math.pi
    steps = max(4, math.ceil(abs(turn) / (math.pi / 16)))
    points = []
    for i in range(1, steps + 1):
        t = first + turn * i / steps
        ex, ey = rx * math.cos(t), ry * math.sin(t)
        points.append((cos * ex - sin * ey + cx, sin * ex + cos * ey + cy))
    points[-1] = end
    return points


def coverage(shapes: list[tuple[list[Polygon], str]], width: int, height: int) -> list[list[float]]:
    """The share (0…1) of each pixel's samples inside any of `shapes` (rings, fill rule)."""
    edges = [(_edges(rings), rule) for rings, rule in shapes]
    cover = [[0.0] * width for _ in range(height)]
    for row in range(height):
        counts = [0] * width
        for sub in range(SAMPLES):
            inside = bytearray(width * SAMPLES)
            y = row + (sub + 0.5) / SAMPLES
            for shape_edges, rule in edges:
                _fill_spans(inside, _spans(shape_edges, y, rule), width * SAMPLES)
            for index, hit in enumerate(inside):
                if hit:
                    counts[index // SAMPLES] += 1
        cover[row] = [count / (SAMPLES * SAMPLES) for count in counts]
    return cover


def _edges(rings: list[Polygon]) -> list[tuple[float, float, float, float]]:
    return [(*ring[i - 1], *ring[i]) for ring in rings for i in range(len(ring)) if ring[i - 1][1] != ring[i][1]]


def _spans(edges: list[tuple[float, float, float, float]], y: float, rule: str) -> list[tuple[float, float]]:
    """The x ranges inside the shape on the line at `y`, by its fill rule."""
    crossings = []
    for x1, y1, x2, y2 in edges:
        if (y1 <= y < y2) or (y2 <= y < y1):
            crossings.append((x1 + (y - y1) * (x2 - x1) / (y2 - y1), 1 if y2 > y1 else -1))
    crossings.sort()
    spans, winding = [], 0
    inside: Callable[[int], bool] = (lambda w: w % 2 == 1) if rule == "evenodd" else (lambda w: w != 0)
    for (x, direction), (next_x, _) in zip(crossings, crossings[1:]):
        winding += direction
        if inside(winding):
            spans.append((x, next_x))
    return spans


def _fill_spans(inside: bytearray, spans: list[tuple[float, float]], samples: int) -> None:
    for left, right in spans:
        first = max(math.ceil(left * SAMPLES - 0.5), 0)
        last = min(math.ceil(right * SAMPLES - 0.5), samples)
        for index in range(first, last):
            inside[index] = 1
