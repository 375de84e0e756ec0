"""The host programs of the claim, the GPU probe and the serving note, run here on a temporary
folder exactly as a host runs them (no SSH, no provider around them)."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.hostops import serving
from sglang_stacks.hostops.connection import Connection
from tests._programs import run_py, run_sh


def claim_call(folder: Path, *args: str, stdin: str = "") -> dict[str, object]:
    done = run_py("claim.py", *args[:2], str(folder), *args[2:], stdin=stdin)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout.splitlines()[0])
    return answer


def test_claim_program_acquires_records_reads_and_releases(tmp_path: Path) -> None:
    folder = tmp_path / "state"

    # Empty stdin: the caller is gone at once, so the update lock is let go after the answer.
    acquired = claim_call(folder, "acquire", "baseline", "--update-id", "u1", "--project", "p")
    recorded = claim_call(
        folder, "record-server", "baseline", "--server-pid", "42", "--server-start-ticks", "7"
    )
    lost = claim_call(folder, "check", "eagle3")
    held = claim_call(folder, "acquire", "eagle3")
    taken = claim_call(folder, "acquire", "eagle3", "--takeover", "--update-id", "u2")
    read = claim_call(folder, "read", "")
    refused = claim_call(folder, "release", "baseline")
    released = claim_call(folder, "release", "eagle3")

    assert acquired["outcome"] == "acquired" and acquired["updating"] is True
    assert recorded["claim"]["server_pid"] == 42  # type: ignore[index]
    assert (lost["outcome"], held["outcome"]) == ("lost", "held")
    assert taken["previous"]["stack"] == "baseline"  # type: ignore[index]
    assert read["claim"]["stack"] == "eagle3" and read["claim"]["update_id"] == "u2"  # type: ignore[index]
    assert read["claim"]["updating_since"] is None  # type: ignore[index]
    assert (refused["outcome"], released["outcome"]) == ("not-owner", "released")
    assert not (folder / "claim.json").exists()


def test_claim_program_reports_a_corrupt_claim_file(tmp_path: Path) -> None:
    (tmp_path / "claim.json").write_text("[1, 2]")
    assert claim_call(tmp_path, "read", "")["outcome"] == "corrupt"


def test_probe_program_runs_each_section_and_keeps_going_after_a_failure(tmp_path: Path) -> None:
    smi = tmp_path / "fake smi"
    smi.write_text('echo "args: $*"\n[ "$1" = topo ] && exit 3\nexit 0\n')

    done = run_sh("probe.sh", nvidia_smi=f"bash\n{smi}", gpu_fields="index,name", app_fields="pid")

    assert done.stdout.splitlines() == [
        "@@sglang-stacks begin query-gpu",
        "args: --query-gpu=index,name --format=csv,noheader,nounits",
        "@@sglang-stacks end query-gpu 0",
        "@@sglang-stacks begin compute-apps",
        "args: --query-compute-apps=pid --format=csv,noheader,nounits",
        "@@sglang-stacks end compute-apps 0",
        "@@sglang-stacks begin topo",
        "args: topo -m",
        "@@sglang-stacks end topo 3",
    ]


def test_probe_program_reports_a_missing_nvidia_smi_as_exit_127(tmp_path: Path) -> None:
    done = run_sh("probe.sh", nvidia_smi=str(tmp_path / "none"), gpu_fields="index", app_fields="pid")
    assert "@@sglang-stacks end query-gpu 127" in done.stdout


def test_serving_note_program_records_reads_and_forgets_only_its_pid(tmp_path: Path) -> None:
    note = str(tmp_path / "state" / "serving.json")
    text = json.dumps({"pid": 4242, "stack": "baseline"}, sort_keys=True)

    assert run_sh("serving_note.sh", mode="record", note=note, stdin=text).returncode == 0
    assert run_sh("serving_note.sh", mode="read", note=note).stdout == text
    run_sh("serving_note.sh", mode="forget", note=note, pid="424")
    assert Path(note).exists()
    run_sh("serving_note.sh", mode="forget", note=note, pid="4242")
    assert not Path(note).exists()
    assert run_sh("serving_note.sh", mode="read", note=note).stdout == ""


def test_a_serving_note_under_the_home_folder_is_kept_there(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    note = serving.ServingNote(stack="baseline", pid=7, release="0.5.8", flags=ServerFlags(tp_size=8))
    serving.record(Connection.local(), "~/state", note)
    assert json.loads((tmp_path / "home" / "state" / "serving.json").read_text())["pid"] == 7
    assert serving.read(Connection.local(), "~/state", "0.5.8") == note
    assert [p.name for p in tmp_path.iterdir()] == ["home"]
