"""The tok/s-over-time picture: a PNG drawn into a pixel buffer with a built-in 5x7 bitmap font.

No plotting library: lines, markers and text are set pixel by pixel, and the PNG is written with
zlib and struct, so the history command works wherever Python does.
"""

from __future__ import annotations

import itertools
import math
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

__all__ = [
    "GRID",
    "INK",
    "SERIES_COLOURS",
    "WHITE",
    "Canvas",
    "Colour",
    "Point",
    "encode_png",
    "nice_step",
    "render_tok_s_plot",
    "text_width",
    "write_tok_s_plot",
]

Colour = tuple[int, int, int]

WHITE: Colour = (255, 255, 255)
INK: Colour = (40, 40, 40)
GRID: Colour = (225, 225, 225)
SERIES_COLOURS: tuple[Colour, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
"""One colour per stack, in the order the stacks are given; repeats after ten."""

# Each glyph is "<char><rows as two hex digits each>": seven rows above the baseline and, for
# g j p q y and the comma, two more below it; bit 4 of a row is its leftmost pixel.
_FONT = """
00E11131519110E 1040C040404040E 20E11010204081F 31F02040201110E 402060A121F0202
51F101E0101110E 60608101E11110E 71F010204080808 80E11110E11110E 90E11110F01020C A0E1111111F1111
B1E11111E11111E C0E11101010110E D1C12111111121C E1F10101E10101F F1F10101E101010 G0E11101711110F
H1111111F111111 I0E04040404040E J0702020202120C K11121418141211 L1010101010101F M111B1515111111
N11111915131111 O0E11111111110E P1E11111E101010 Q0E11111115120D R1E11111E141211 S0F10100E01011E
T1F040404040404 U1111111111110E V11111111110A04 W1111111515150A X11110A040A1111 Y1111110A040404
Z1F01020408101F a00000E010F110F b1010161911111E c00000E1010110E d01010D1311110F e00000E111F100E
f0609081C080808 g00000F1111110F010E h10101619111111 i04000C0404040E j02000602020202120C k10101214181412
l0C04040404040E m00001A15151111 n00001619111111 o00000E1111110E p00001E1111111E1010 q00000F1111110F0101
r00001619101010 s00000E100E011E t08081C08080906 u0000111111130D v00001111110A04 w0000111115150A
x0000110A040A11 y0000111111110F010E z00001F0204081F -0000001F000000 _0000000000001F .00000000000C0C
,00000000000C0C0408 :000C0C000C0C00 /00010204081000 %18190204081303 (02040808080402 )08040202020408
+0004041F040400 =00001F001F0000 ?0E110102040004
"""
_GLYPHS = {entry[0]: entry[1:].ljust(18, "0") for entry in _FONT.split()} | {" ": "0" * 18}
GLYPH_WIDTH, GLYPH_HEIGHT = 5, 7  # height above the baseline; descenders go two rows below


def _glyph_rows(char: str) -> list[int]:
    code = _GLYPHS.get(char, _GLYPHS["?"])
    return [int(code[i : i + 2], 16) for i in range(0, 18, 2)]


@dataclass(frozen=True)
class Point:
    """One benchmark of one stack: when, its mean tok/s, and optionally its 95 % interval."""

    when: datetime
    tok_s: float
    low: float | None = None
    high: float | None = None


class Canvas:
    """An RGB pixel buffer with just the drawing the plot needs."""

    def __init__(self, width: int, height: int, background: Colour = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x: int, y: int, colour: Colour) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = (y * self.width + x) * 3
            self.pixels[offset : offset + 3] = bytes(colour)

    def get(self, x: int, y: int) -> Colour:
        offset = (y * self.width + x) * 3
        red, green, blue = self.pixels[offset : offset + 3]
        return (red, green, blue)

    def rect(self, x: int, y: int, width: int, height: int, colour: Colour) -> None:
        for row in range(max(0, y), min(self.height, y + height)):
            for column in range(max(0, x), min(self.width, x + width)):
                self.set(column, row, colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: Colour, thickness: int = 1) -> None:
        """Bresenham's line, each step stamped as a ``thickness`` square."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        step_x, step_y = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        offset = thickness // 2
        while True:
            self.rect(x0 - offset, y0 - offset, thickness, thickness, colour)
            if x0 == x1 and y0 == y1:
                return
            doubled = 2 * error
            if doubled >= dy:
                error += dy
                x0 += step_x
            if doubled <= dx:
                error += dx
                y0 += step_y

    def text(self, x: int, y: int, text: str, colour: Colour = INK, scale: int = 2) -> None:
        """Draw ``text`` with its top-left corner at (x, y)."""
        for index, char in enumerate(text):
            left = x + index * (GLYPH_WIDTH + 1) * scale
            for row, bits in enumerate(_glyph_rows(char)):
                for column in range(GLYPH_WIDTH):
                    if bits & (1 << (GLYPH_WIDTH - 1 - column)):
                        self.rect(left + column * scale, y + row * scale, scale, scale, colour)


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * (GLYPH_WIDTH + 1) * scale - scale


def encode_png(canvas: Canvas) -> bytes:
    """The canvas as an 8-bit RGB PNG (every row unfiltered, one zlib stream)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    stride = canvas.width * 3
    raw = b"".join(
        b"\x00" + bytes(canvas.pixels[row * stride : (row + 1) * stride]) for row in range(canvas.height)
    )
    header = struct.pack(">IIBBBBB", canvas.width, canvas.height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def nice_step(span: float, ticks: int = 5) -> float:
    """A 1, 2 or 5 times a power of ten step giving about ``ticks`` intervals over ``span``."""
    rough = span / max(1, ticks)
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def _number(value: float) -> str:
    return f"{value:.0f}" if value == round(value) else f"{value:g}"


def render_tok_s_plot(
    series: Mapping[str, Sequence[Point]],
    *,
    title: str = "tok/s per stack over time",
    width: int = 900,
    height: int = 480,
) -> Canvas:
    """Draw one coloured line of points per stack (with 95 % bars), axes, ticks and a legend."""
    points = [p for stack_points in series.values() for p in stack_points]
    if not points:
        raise ValueError("nothing to plot: every stack has no results")
    canvas = Canvas(width, height)
    legend = [f"{stack} {pts[-1].tok_s:.1f}" for stack, pts in series.items() if pts]
    legend_width = max(text_width(entry) for entry in legend) + 40
    left, top, bottom = 70, 64, 56
    right = legend_width + 30
    plot_w, plot_h = width - left - right, height - top - bottom

    highest = max(max(p.tok_s, p.high or p.tok_s) for p in points)
    y_step = nice_step(highest * 1.1 if highest > 0 else 1.0)
    y_max = y_step * math.ceil(highest * 1.05 / y_step) if highest > 0 else y_step * 5
    first, last = min(p.when for p in points), max(p.when for p in points)
    if last - first < timedelta(minutes=2):
        first, last = first - timedelta(minutes=1), last + timedelta(minutes=1)
    pad = (last - first) * 0.05
    first, last = first - pad, last + pad
    span_s = (last - first).total_seconds()

    def to_x(when: datetime) -> int:
        return left + round((when - first).total_seconds() / span_s * plot_w)

    def to_y(value: float) -> int:
        return top + plot_h - round(value / y_max * plot_h)

    canvas.text((width - text_width(title)) // 2, 12, title, INK, 2)
    tick = 0.0
    while tick <= y_max + y_step / 1000:
        y = to_y(tick)
        canvas.line(left, y, left + plot_w, y, GRID)
        label = _number(tick)
        canvas.text(left - 8 - text_width(label), y - GLYPH_HEIGHT, label, INK, 2)
        tick += y_step
    canvas.text(left - 8 - text_width("tok/s"), top - 30, "tok/s", INK, 2)

    date_format = "%m-%d" if span_s > 3 * 86400 else "%m-%d %H:%M"
    label_w = text_width(first.strftime(date_format))
    x_ticks = max(2, min(6, plot_w // (label_w + 30)))
    for index in range(x_ticks):
        when = first + (last - first) * ((index + 0.5) / x_ticks)
        x = to_x(when)
        canvas.line(x, top + plot_h, x, top + plot_h + 5, INK)
        label = when.strftime(date_format)
        canvas.text(x - text_width(label) // 2, top + plot_h + 12, label, INK, 2)
    canvas.text(left + plot_w - text_width("time (UTC)"), height - 18, "time (UTC)", INK, 2)

    canvas.line(left, top, left, top + plot_h, INK, 2)
    canvas.line(left, top + plot_h, left + plot_w, top + plot_h, INK, 2)

    for index, (_stack, stack_points) in enumerate(series.items()):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        ordered = sorted(stack_points, key=lambda p: p.when)
        for before, after in itertools.pairwise(ordered):
            canvas.line(to_x(before.when), to_y(before.tok_s), to_x(after.when), to_y(after.tok_s), colour, 2)
        for point in ordered:
            x, y = to_x(point.when), to_y(point.tok_s)
            if point.low is not None and point.high is not None:
                canvas.line(x, to_y(point.low), x, to_y(point.high), colour)
                canvas.line(x - 4, to_y(point.low), x + 4, to_y(point.low), colour)
                canvas.line(x - 4, to_y(point.high), x + 4, to_y(point.high), colour)
            canvas.rect(x - 4, y - 4, 9, 9, colour)

    legend_x = width - legend_width - 10
    canvas.text(legend_x, top, "latest tok/s", INK, 2)
    for index, entry in enumerate(legend):
        y = top + 28 + index * 24
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        canvas.rect(legend_x, y, 22, 14, colour)
        canvas.text(legend_x + 30, y, entry, INK, 2)
    return canvas


def write_tok_s_plot(
    series: Mapping[str, Sequence[Point]],
    path: str | os.PathLike[str],
    *,
    title: str = "tok/s per stack over time",
) -> Path:
    """Render the plot and write it as a PNG at ``path``; returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(encode_png(render_tok_s_plot(series, title=title)))
    return target
