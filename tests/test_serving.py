"""The note of what the host serves, and the flag-by-flag sentence a preview prints from it."""

from __future__ import annotations

from pathlib import Path

from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection

BASELINE = {"--cuda-graph-max-bs": "512", "--tensor-parallel-size": "8", "--disable-custom-all-reduce": True}
EAGLE3 = {
    "--cuda-graph-max-bs": "128",
    "--tensor-parallel-size": "8",
    "--disable-custom-all-reduce": True,
    "--speculative-algorithm": "EAGLE",
}


def test_flag_changes_lists_changed_added_and_removed_flags() -> None:
    assert serving.flag_changes(BASELINE, EAGLE3) == [
        "~ --cuda-graph-max-bs 512 => 128",
        "+ --speculative-algorithm EAGLE",
    ]
    assert serving.flag_changes(EAGLE3, BASELINE) == [
        "~ --cuda-graph-max-bs 128 => 512",
        "- --speculative-algorithm EAGLE",
    ]
    assert serving.flag_changes(BASELINE, BASELINE) == []


def test_describe_names_the_serving_stack_and_each_change() -> None:
    note = {"stack": "baseline", "flags": BASELINE}
    text = serving.describe(note, "eagle3-bs128", EAGLE3, "root@gpu-box:22")
    # The SSH user is spelled as the host knows it, not capitalised.
    assert text.startswith("root@gpu-box:22 now serves baseline; deploying eagle3-bs128 changes")
    assert "~ --cuda-graph-max-bs 512 => 128" in text
    assert "same launch flags" in serving.describe(note, "baseline", BASELINE, "the local host")
    idle = serving.describe(None, "baseline", BASELINE, "the local host")
    assert idle.startswith("The local host serves no")


def test_record_read_and_forget_on_the_host(tmp_path: Path) -> None:
    conn = Connection.local()
    state_dir = str(tmp_path / "state")
    assert serving.read(conn, state_dir) is None
    serving.record(conn, state_dir, {"stack": "baseline", "pid": 4242, "flags": BASELINE})
    assert serving.read(conn, state_dir) == {"stack": "baseline", "pid": 4242, "flags": BASELINE}
    serving.forget(conn, state_dir, 42)  # another server's pid: the note stays
    assert serving.read(conn, state_dir) is not None
    serving.forget(conn, state_dir, 4242)
    assert serving.read(conn, state_dir) is None
