"""A registry's SVG icon drawn for an avatar (docs/configuration.md "Agents from the registry"):
the subset the ACP registry's icons use, filled by their rule; the rest refused."""

from __future__ import annotations

import math

import pytest

from bridge.matrix.svg_icon import arc_points, parse, path_rings, path_tokens, render

INK, PAPER = (0, 0, 200), (255, 255, 255)
# opencode's icon in the ACP registry: a square frame, its hole cut by the even-odd rule
FRAME = b"""<svg width="16" height="16" viewBox="0 0 16 16" fill="none" xmlns="http://www.w3.org/2000/svg">
<path fill-rule="evenodd" clip-rule="evenodd" d="M13 14H3V2H13V14ZM10.5 4.4H5.5V11.6H10.5V4.4Z" fill="currentColor"/>
</svg>"""


def test_a_shape_is_filled_where_it_lies_and_its_edges_are_blended():
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><rect x="0" y="0" width="5" height="10"/></svg>'
    pixel = render(svg, 20, 0, INK, PAPER)
    assert pixel(2, 10) == INK and pixel(15, 10) == PAPER
    half = render(svg.replace(b'width="5"', b'width="5.25"'), 20, 0, INK, PAPER)(10, 3)
    assert half == (128, 128, 228)  # half of the pixel's samples inside


def test_the_fill_rule_decides_the_hole():
    frame = render(FRAME, 32, 0, INK, PAPER)
    assert frame(16, 16) == PAPER  # the hole
    assert frame(8, 16) == INK  # the frame's left side
    assert frame(1, 16) == PAPER  # outside it
    same_way = (
        b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><path d="M0 0H10V10H0Z M2 2H8V8H2Z"/></svg>'
    )
    assert render(same_way, 10, 0, INK, PAPER)(5, 5) == INK  # nonzero, both rings turning one way
    holed = same_way.replace(b"<path ", b'<path fill-rule="evenodd" ')
    assert render(holed, 10, 0, INK, PAPER)(5, 5) == PAPER


def test_the_view_box_is_fitted_into_the_square_less_the_margin():
    shapes, box = parse(FRAME.replace(b'viewBox="0 0 16 16"', b'viewBox="0 0 32 16"'))
    assert box == (0, 0, 32, 16)
    pixel = render(FRAME, 40, 10, INK, PAPER)
    assert pixel(5, 20) == PAPER and pixel(14, 20) == INK  # the frame: 13.75…16.9 across


def test_path_data_every_command_and_compact_arc_flags():
    tokens = list(path_tokens("M1,2 3 4l-1-1.5e0Zm0 0h2v2H0V0c1 1 2 2 3 3s1 1 2 2q1 1 2 2t3 3a1 1 0 011 1"))
    assert [c for c, _ in tokens] == ["M", "L", "l", "Z", "m", "h", "v", "H", "V", "c", "s", "q", "t", "a"]
    assert tokens[1] == ("L", [3.0, 4.0]) and tokens[2] == ("l", [-1.0, -1.5])
    assert tokens[-1] == ("a", [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError):
        list(path_tokens("M 1"))
    with pytest.raises(ValueError):
        list(path_tokens("1 2"))


def test_relative_moves_lines_and_a_closed_subpath():
    [ring] = path_rings("m1 1 h2 v2 h-2 z")
    assert ring == [(1, 1), (3, 1), (3, 3), (1, 3)]


def test_an_arc_goes_around_its_centre():
    points = arc_points((0, 0), 1, 1, 0, False, True, (2, 0))  # half a circle around (1, 0)
    assert points[-1] == (2, 0)
    assert all(math.isclose(math.hypot(x - 1, y), 1, abs_tol=1e-9) for x, y in points)
    assert all(y <= 1e-9 for _, y in points) or all(y >= -1e-9 for _, y in points)


@pytest.mark.parametrize(
    "body",
    [
        b'<path d="M0 0H4V4Z" transform="scale(2)"/>',
        b'<path d="M0 0H4V4Z" stroke="currentColor"/>',
        b'<path d="M0 0H4V4Z" fill="url(#g)"/>',
        b"<text>A</text>",
        b"",
    ],
)
def test_what_it_cannot_draw_is_refused(body):
    with pytest.raises(ValueError):
        render(b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 4 4">' + body + b"</svg>", 8, 0, INK, PAPER)


def test_what_is_not_an_svg_is_refused():
    for data in (b"not xml", b"<html/>", b"<svg>" + b" " * 70000 + b"</svg>"):
        with pytest.raises(ValueError):
            parse(data)
