"""The recorded rows are what the releases' own code resolves: re-recorded here from two wheels."""

from __future__ import annotations

import hashlib
import json

import pytest

from sglang_flags import build_parser, load_table
from sglang_flags.wheels import default_cache
from sglang_world.grid import GRID, argv_of
from sglang_world.record import record_release
from sglang_world.recorded_store import RECORDED, grid_digest, read_index, recorded_rows_raw

# Every 37th point: all GPU sizes, tp sizes, chunk and graph settings, algorithms and both models
# come up, in a few seconds per release instead of minutes.
SAMPLE = list(range(0, len(GRID), 37))


@pytest.mark.parametrize("release", ["0.5.8", "0.5.23"])
def test_rows_recorded_again_from_the_wheel_equal_the_shipped_ones(release: str) -> None:
    recording = record_release(release, default_cache(), SAMPLE)
    assert recording.refused == [] and recording.rows is not None
    shipped = recorded_rows_raw(release)
    assert recording.rows == [shipped[i] for i in SAMPLE]


def test_the_shipped_files_are_the_indexed_ones_for_this_grid() -> None:
    index = read_index()
    assert index["grid"] == grid_digest()
    for name in index["files"]:
        text = (RECORDED / name).read_text(encoding="utf-8")
        assert json.loads(text)["grid"] == grid_digest()
    for name, digest in index["files"].items():
        assert digest == "sha256:" + hashlib.sha256((RECORDED / name).read_bytes()).hexdigest(), name


def test_a_refused_flag_value_is_the_parsers_own_refusal() -> None:
    # 0.5.1 has neither STANDALONE nor NGRAM: its parser exits 2 on them, as recorded.
    rows = recorded_rows_raw("0.5.1")
    options = set(load_table("0.5.1").option_strings())
    parser = build_parser("0.5.1")  # one parser for every point: building it is most of the cost
    refused = [point for point, row in zip(GRID, rows, strict=True) if row.get("error") == "SystemExit: 2"]
    assert refused
    for point in refused:
        with pytest.raises(SystemExit):
            parser.parse_args(argv_of(point, options))
