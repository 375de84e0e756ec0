"""The shipped tables and their index agree, and storing new tables keeps them agreeing."""

import json
import shutil

from sglang_flags import known_releases, table_index
from sglang_flags.store import TABLES, index_problems, read_index, store_tables

FLAGS_A = [{"flags": ["--a"], "dest": "a", "type": "int", "choices": None, "default": 1, "nargs": None,
            "action": "_StoreAction"}]  # fmt: skip
FLAGS_B = [*FLAGS_A, {**FLAGS_A[0], "flags": ["--b"], "dest": "b"}]


def test_the_shipped_tables_match_their_index():
    # Fails when a table was edited or added by hand, or the index was not rewritten with it.
    assert index_problems() == []


def test_every_release_from_0_5_1_on_ships_and_none_is_refused():
    releases = known_releases()
    assert releases[0] == "0.5.1" and releases[-1] == "0.5.23" and len(releases) == 42
    assert {"0.5.8", "0.5.8.post1", "0.5.15.post1", "0.5.23"} <= set(releases)
    assert table_index()["refused"] == {}


def test_identical_parsers_share_the_file_of_the_oldest_release():
    releases = table_index()["releases"]
    assert releases["0.5.8.post1"] == releases["0.5.8"] == "0.5.8.json"
    assert len(set(releases.values())) < len(releases)


def test_store_deduplicates_records_refusals_and_removes_stale_files(tmp_path):
    store_tables({"1.0.0": FLAGS_A, "1.0.0.post1": FLAGS_A, "1.0.1": FLAGS_B}, {}, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["1.0.0.json", "1.0.1.json", "index.json"]
    assert read_index(tmp_path)["releases"] == {
        "1.0.0": "1.0.0.json",
        "1.0.0.post1": "1.0.0.json",
        "1.0.1": "1.0.1.json",
    }
    store_tables({}, {"1.0.1": ["a default comes from a stand-in"]}, tmp_path)
    index = read_index(tmp_path)
    assert "1.0.1" not in index["releases"] and not (tmp_path / "1.0.1.json").exists()
    assert index["refused"] == {"1.0.1": ["a default comes from a stand-in"]}
    assert index_problems(tmp_path) == []


def test_a_table_edited_or_added_by_hand_is_caught(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(TABLES, tables)
    edited = json.loads((tables / "0.5.8.json").read_text())
    edited["flags"][1]["default"] = "edited"
    (tables / "0.5.8.json").write_text(json.dumps(edited))
    (tables / "0.5.24.json").write_text("{}")
    assert index_problems(tables) == [
        "0.5.24.json is not in index.json; regenerate the tables instead of adding one by hand.",
        "0.5.8.json changed since index.json was written; regenerate it, do not edit it.",
    ]
