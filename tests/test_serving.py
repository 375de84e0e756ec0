"""The note of what the host serves, and the flag-by-flag sentence a preview prints from it."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection

BASELINE = ServerFlags(cuda_graph_max_bs=512, tp_size=8, disable_custom_all_reduce=True)
EAGLE3 = BASELINE.model_copy(update={"cuda_graph_max_bs": 128, "speculative_algorithm": "EAGLE"})


def note(flags: ServerFlags, stack: str = "baseline", release: str = "0.5.8") -> serving.ServingNote:
    return serving.ServingNote(stack=stack, pid=4242, release=release, flags=flags)


def test_changes_list_changed_added_and_removed_flags_as_the_release_spells_them() -> None:
    assert serving.changes_from(note(BASELINE), EAGLE3, "0.5.8") == [
        "~ --cuda-graph-max-bs 512 => 128",
        "+ --speculative-algorithm EAGLE",
    ]
    assert serving.changes_from(note(EAGLE3), BASELINE, "0.5.8") == [
        "~ --cuda-graph-max-bs 128 => 512",
        "- --speculative-algorithm EAGLE",
    ]
    assert serving.changes_from(note(BASELINE), BASELINE, "0.5.8") == []
    # The same flag under each release's own spelling: one change, not a removal and an addition.
    assert serving.changes_from(note(BASELINE, release="0.5.23"), EAGLE3, "0.5.23")[0] == (
        "~ --cuda-graph-max-bs-decode 512 => 128"
    )


def test_describe_names_the_serving_stack_and_each_change() -> None:
    text = serving.describe(note(BASELINE), "eagle3-bs128", EAGLE3, "0.5.8", "root@gpu-box:22")
    # The SSH user is spelled as the host knows it, not capitalised.
    assert text.startswith("root@gpu-box:22 now serves baseline; deploying eagle3-bs128 changes")
    assert "~ --cuda-graph-max-bs 512 => 128" in text
    assert "same launch flags" in serving.describe(
        note(BASELINE), "baseline", BASELINE, "0.5.8", "the local host"
    )
    idle = serving.describe(None, "baseline", BASELINE, "0.5.8", "the local host")
    assert idle.startswith("The local host serves no")


def test_record_read_and_forget_on_the_host(tmp_path: Path) -> None:
    conn = Connection.local()
    state_dir = str(tmp_path / "state")
    assert serving.read(conn, state_dir, "0.5.8") is None
    serving.record(conn, state_dir, note(BASELINE))
    assert serving.read(conn, state_dir, "0.5.8") == note(BASELINE)
    serving.forget(conn, state_dir, 42)  # another server's pid: the note stays
    assert serving.read(conn, state_dir, "0.5.8") is not None
    serving.forget(conn, state_dir, 4242)
    assert serving.read(conn, state_dir, "0.5.8") is None


def test_an_int_flag_stays_an_int_in_the_note_and_in_the_preview(tmp_path: Path) -> None:
    # The engine hands every number over as a float: the note keeps each flag's own type.
    conn = Connection.local()
    state_dir = tmp_path / "state"
    engine = {"tp_size": 8.0, "port": 32210.0, "cuda_graph_max_bs": 256.0, "max_prefill_tokens": 8192.0}
    served = serving.ServingNote.model_validate(
        {"stack": "baseline", "pid": 42.0, "release": "0.5.8", "flags": engine}
    )

    serving.record(conn, str(state_dir), served)

    written = json.loads((state_dir / "serving.json").read_text())
    assert written["flags"] == {
        "tp_size": 8,
        "port": 32210,
        "cuda_graph_max_bs": 256,
        "max_prefill_tokens": 8192,
    }
    assert all(type(value) is int for value in [written["pid"], *written["flags"].values()])
    current = serving.read(conn, str(state_dir), "0.5.8")
    assert current is not None
    lines = serving.changes_from(current, BASELINE.model_copy(update={"cuda_graph_max_bs": 128}), "0.5.8")
    assert "~ --cuda-graph-max-bs 256 => 128" in lines


def test_a_note_of_an_earlier_version_reads_with_its_flags_typed(tmp_path: Path) -> None:
    # Earlier versions wrote the numbers as the engine handed them over, and before that the
    # flags as rendered options.
    conn = Connection.local()
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    for flags in (
        {"tp_size": 8.0, "cuda_graph_max_bs": 256.0},
        {"--tp-size": "8", "--cuda-graph-max-bs": "256"},
    ):
        (state_dir / "serving.json").write_text(json.dumps({"stack": "baseline", "pid": 7, "flags": flags}))
        current = serving.read(conn, str(state_dir), "0.5.8")
        assert current is not None and (current.flags.tp_size, current.flags.cuda_graph_max_bs) == (8, 256)
        assert serving.changes_from(current, ServerFlags(tp_size=8, cuda_graph_max_bs=128), "0.5.8") == [
            "~ --cuda-graph-max-bs 256 => 128"
        ]
