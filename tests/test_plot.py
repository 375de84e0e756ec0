"""The tok/s plot is a valid PNG that shows each stack's colour, axes and legend."""

from __future__ import annotations

import struct
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sglang_stacks.results import plot

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def _decode(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an unfiltered 8-bit RGB PNG, checking every chunk's CRC."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks = 8, dict[bytes, bytes]()
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        kind, data = png[offset + 4 : offset + 8], png[offset + 8 : offset + 8 + length]
        (crc,) = struct.unpack(">I", png[offset + 8 + length : offset + 12 + length])
        assert crc == zlib.crc32(kind + data), kind
        chunks[kind] = chunks.get(kind, b"") + data
        offset += 12 + length
    assert list(chunks) == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour_type, _, _, _ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour_type) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + width * 3
    assert len(raw) == stride * height
    rows = [raw[r * stride : (r + 1) * stride] for r in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


def _colours(rows: list[bytes]) -> set[tuple[int, int, int]]:
    return {(row[i], row[i + 1], row[i + 2]) for row in rows for i in range(0, len(row), 3)}


def _campaign() -> dict[str, list[plot.Point]]:
    return {
        "baseline": [plot.Point(T0, 82.0, 81.4, 82.6), plot.Point(T0 + timedelta(hours=2), 89.5, 89.0, 90.0)],
        "eagle3-bs128": [plot.Point(T0 + timedelta(hours=4), 54.1, 53.7, 54.5)],
    }


def test_writes_a_valid_png_with_each_stack_in_its_colour(tmp_path: Path) -> None:
    path = plot.write_tok_s_plot(_campaign(), tmp_path / "out" / "history.png")
    width, height, rows = _decode(path.read_bytes())
    assert (width, height) == (900, 480)
    colours = _colours(rows)
    assert plot.SERIES_COLOURS[0] in colours and plot.SERIES_COLOURS[1] in colours
    assert plot.SERIES_COLOURS[2] not in colours  # only two stacks
    assert plot.INK in colours and plot.WHITE in colours
    assert path.stat().st_size < 60_000


def test_points_sit_higher_for_faster_stacks() -> None:
    canvas = plot.render_tok_s_plot(_campaign())

    def rows_with(colour: tuple[int, int, int]) -> list[int]:
        return [y for y in range(canvas.height) for x in range(0, 600) if canvas.get(x, y) == colour]

    baseline_top = min(rows_with(plot.SERIES_COLOURS[0]))
    eagle_top = min(rows_with(plot.SERIES_COLOURS[1]))
    assert baseline_top < eagle_top  # smaller y is higher on the picture


def test_text_uses_the_built_in_font() -> None:
    canvas = plot.Canvas(40, 20)
    canvas.text(1, 1, "1", scale=1)
    lit = {(x, y) for y in range(20) for x in range(40) if canvas.get(x, y) == plot.INK}
    # "1": a centre stem, a flag to its left, a foot three pixels wide.
    assert {(3, 1), (3, 4), (3, 7), (2, 2), (2, 7), (4, 7)} <= lit
    assert (1, 4) not in lit


def test_every_glyph_is_five_pixels_wide() -> None:
    for char in "AZaz09-_.:/%()?":
        rows = plot._glyph_rows(char)
        assert len(rows) == 9 and all(0 <= row < 32 for row in rows), char
    assert plot._glyph_rows("~") == plot._glyph_rows("?")


def test_a_single_point_still_plots() -> None:
    canvas = plot.render_tok_s_plot({"baseline": [plot.Point(T0, 89.5)]})
    assert plot.SERIES_COLOURS[0] in _colours([bytes(canvas.pixels)])


def test_nothing_to_plot_is_an_error() -> None:
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.render_tok_s_plot({"baseline": []})


@pytest.mark.parametrize(("span", "step"), [(95.0, 20.0), (9.0, 2.0), (480.0, 100.0), (0.5, 0.1)])
def test_axis_steps_are_round_numbers(span: float, step: float) -> None:
    assert plot.nice_step(span) == pytest.approx(step)
