"""promote: the winner's server and draft model land in the target's file as text, after the diff
is shown and confirmed; the rest of the target file stays as its author wrote it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from sglang_stacks.cli import main
from sglang_stacks.config.stackfile import load_stack_spec

BASELINE = """\
encryptionsalt: v1:c2FsdA==:v1:c2FsdHk=:c2FsdA==
# Campaign: baseline, CUDA-graph max batch size 128.
config:
  sglang-stacks:host:
    kind: emulator
  sglang-stacks:model:
    # Kimi-K2.5 INT4 at TP=8.
    path: /shared/kimi-k2.5-int4
    weights_per_gpu_gb: 72.33
  sglang-stacks:server:
    tp_size: 8
    trust_remote_code: true
    port: 30000
    cuda_graph_max_bs: 128
  # Single-stream decode speed, the campaign's measure.
  sglang-stacks:benchmark:
    input_len: 1024
    output_len: 512
    repetitions: 5
"""

EAGLE3 = """\
config:
  sglang-stacks:host:
    kind: emulator
  sglang-stacks:model:
    path: /shared/kimi-k2.5-int4
    weights_per_gpu_gb: 72.33
  sglang-stacks:draftModel:
    source: host
    path_on_host: /data/eagle3/output_100k_sglang/4
    weights_gb: 2.4
  sglang-stacks:server:
    tp_size: 8
    trust_remote_code: true
    port: 30000
    cuda_graph_max_bs: 128
    mem_fraction_static: 0.88
    speculative_algorithm: EAGLE
    speculative_num_steps: 2
    speculative_eagle_topk: 4
    speculative_num_draft_tokens: 4
  sglang-stacks:benchmark:
    input_len: 64
    output_len: 64
    repetitions: 3
"""


@pytest.fixture
def stacks_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "stacks"
    folder.mkdir()
    (folder / "Pulumi.baseline.yaml").write_text(BASELINE)
    (folder / "Pulumi.eagle3-bs128.yaml").write_text(EAGLE3)
    return folder


def promote(stacks_dir: Path, *args: str) -> int:
    return main(["promote", *args, "--stacks-dir", str(stacks_dir)])


def config_of(path: Path) -> dict[str, object]:
    config: dict[str, object] = yaml.safe_load(path.read_text())["config"]
    return config


def answer(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def test_yes_writes_the_winners_server_and_draft_model(stacks_dir: Path) -> None:
    assert promote(stacks_dir, "eagle3-bs128", "baseline", "--yes") == 0

    baseline, eagle3 = (
        config_of(stacks_dir / "Pulumi.baseline.yaml"),
        config_of(stacks_dir / "Pulumi.eagle3-bs128.yaml"),
    )
    assert baseline["sglang-stacks:server"] == eagle3["sglang-stacks:server"]
    # Added inside `config:`, where Pulumi reads it.
    assert baseline["sglang-stacks:draftModel"] == eagle3["sglang-stacks:draftModel"]
    spec = load_stack_spec("baseline", stacks_dir)
    assert spec.server.speculative_algorithm == "EAGLE"
    assert spec.draft_model is not None and spec.draft_model.weights_gb == 2.4


def test_comments_and_the_other_sections_stay(stacks_dir: Path) -> None:
    promote(stacks_dir, "eagle3-bs128", "baseline", "--yes")

    text = (stacks_dir / "Pulumi.baseline.yaml").read_text()
    assert text.startswith("encryptionsalt: v1:c2FsdA==")
    for comment in (
        "# Campaign: baseline, CUDA-graph max batch size 128.\n",
        "    # Kimi-K2.5 INT4 at TP=8.\n",
        "  # Single-stream decode speed, the campaign's measure.\n  sglang-stacks:benchmark:\n",
    ):
        assert comment in text
    benchmark = config_of(stacks_dir / "Pulumi.baseline.yaml")["sglang-stacks:benchmark"]
    assert benchmark == {"input_len": 1024, "output_len": 512, "repetitions": 5}  # not the winner's


def test_the_diff_is_shown_before_anything_is_written(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    promote(stacks_dir, "eagle3-bs128", "baseline", "--yes")

    shown = capsys.readouterr().out
    assert f"--- {stacks_dir / 'Pulumi.baseline.yaml'}\n" in shown
    added = {line for line in shown.splitlines() if line.startswith("+") and not line.startswith("+++")}
    assert added == {
        "+    mem_fraction_static: 0.88",
        "+    speculative_algorithm: EAGLE",
        "+    speculative_num_steps: 2",
        "+    speculative_eagle_topk: 4",
        "+    speculative_num_draft_tokens: 4",
        "+  sglang-stacks:draftModel:",
        "+    source: host",
        "+    path_on_host: /data/eagle3/output_100k_sglang/4",
        "+    weights_gb: 2.4",
    }
    assert not [line for line in shown.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert "pulumi preview --diff -s baseline" in shown


@pytest.mark.parametrize("reply", ["n\n", "\n", "maybe\n", ""])
def test_anything_but_yes_writes_nothing(
    stacks_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], reply: str
) -> None:
    answer(monkeypatch, reply)  # "" is a closed input, as in a script without --yes

    assert promote(stacks_dir, "eagle3-bs128", "baseline") == 1

    assert (stacks_dir / "Pulumi.baseline.yaml").read_text() == BASELINE
    shown = capsys.readouterr().out
    assert "+    speculative_algorithm: EAGLE" in shown  # the diff came first
    assert "[y/N]" in shown
    assert "Nothing written" in shown and "--yes" in shown


def test_answering_y_writes(stacks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answer(monkeypatch, "y\n")

    assert promote(stacks_dir, "eagle3-bs128", "baseline") == 0

    assert "speculative_algorithm: EAGLE" in (stacks_dir / "Pulumi.baseline.yaml").read_text()


def test_a_winner_without_a_draft_model_removes_the_targets(stacks_dir: Path) -> None:
    assert promote(stacks_dir, "baseline", "eagle3-bs128", "--yes") == 0

    eagle3 = config_of(stacks_dir / "Pulumi.eagle3-bs128.yaml")
    assert "sglang-stacks:draftModel" not in eagle3
    assert (
        eagle3["sglang-stacks:server"]
        == config_of(stacks_dir / "Pulumi.baseline.yaml")["sglang-stacks:server"]
    )
    assert load_stack_spec("eagle3-bs128", stacks_dir).draft_model is None


def test_promoting_back_restores_the_file_exactly(stacks_dir: Path) -> None:
    (stacks_dir / "Pulumi.original.yaml").write_text(BASELINE)
    promote(stacks_dir, "eagle3-bs128", "baseline", "--yes")

    assert promote(stacks_dir, "original", "baseline", "--yes") == 0

    assert (stacks_dir / "Pulumi.baseline.yaml").read_text() == BASELINE


def test_a_winner_file_without_a_final_newline_keeps_lines_apart(stacks_dir: Path) -> None:
    # The server section is the winner's last, so its last line has no newline of its own.
    (stacks_dir / "Pulumi.last.yaml").write_text(
        "config:\n  sglang-stacks:model:\n    path: /m\n    weights_per_gpu_gb: 72.33\n"
        "  sglang-stacks:server:\n    tp_size: 8\n    cuda_graph_max_bs: 256"
    )

    assert promote(stacks_dir, "last", "baseline", "--yes") == 0

    text = (stacks_dir / "Pulumi.baseline.yaml").read_text()
    assert "    cuda_graph_max_bs: 256\n  # Single-stream decode speed" in text
    assert config_of(stacks_dir / "Pulumi.baseline.yaml")["sglang-stacks:server"] == {
        "tp_size": 8,
        "cuda_graph_max_bs": 256,
    }


def test_an_invalid_result_is_refused_and_nothing_written(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (stacks_dir / "Pulumi.typo.yaml").write_text(
        EAGLE3.replace("cuda_graph_max_bs: 128", "cuda_graph_max_bss: 128")
    )

    assert promote(stacks_dir, "typo", "baseline", "--yes") == 2

    assert (stacks_dir / "Pulumi.baseline.yaml").read_text() == BASELINE
    error = capsys.readouterr().err
    assert "nothing was written" in error
    assert "sglang-stacks:server.cuda_graph_max_bss" in error
    assert "did you mean cuda_graph_max_bs?" in error
    assert "Fix Pulumi.typo.yaml first" in error


def test_a_target_that_already_matches_is_left_alone(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    promote(stacks_dir, "eagle3-bs128", "baseline", "--yes")
    written = (stacks_dir / "Pulumi.baseline.yaml").stat().st_mtime_ns
    capsys.readouterr()

    assert promote(stacks_dir, "eagle3-bs128", "baseline", "--yes") == 0

    assert "nothing to promote" in capsys.readouterr().out
    assert (stacks_dir / "Pulumi.baseline.yaml").stat().st_mtime_ns == written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["baseline", "baseline"], "'baseline' was named twice"),
        (["eagle3-bs512", "baseline"], "no stack file Pulumi.eagle3-bs512.yaml"),
        (["eagle3-bs128", "production"], "no stack file Pulumi.production.yaml"),
        (["../eagle3", "baseline"], "is not a stack name"),
    ],
)
def test_bad_stack_names_are_refused(
    stacks_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert promote(stacks_dir, *args, "--yes") == 2

    assert message in capsys.readouterr().err
    assert (stacks_dir / "Pulumi.baseline.yaml").read_text() == BASELINE


def test_the_target_defaults_to_baseline(stacks_dir: Path) -> None:
    assert promote(stacks_dir, "eagle3-bs128", "--yes") == 0

    assert "sglang-stacks:draftModel" in config_of(stacks_dir / "Pulumi.baseline.yaml")


COMMENTED = """\
encryptionsalt: v1:c2FsdA==:v1:c2FsdHk=:c2FsdA==
config:
  sglang-stacks:host:
    kind: emulator
  sglang-stacks:model:
    weights_per_gpu_gb: 72.33  # measured on the host, not the card's nominal size
    # The path the host mounts.
    path: /shared/kimi-k2.5-int4
  # The draft model EAGLE-3 reads.
  sglang-stacks:draftModel:
    source: host
    path_on_host: /data/eagle3/old
    weights_gb: 2.4
  # Flags of the tuned server.
  sglang-stacks:server:
    tp_size: 8
    cuda_graph_max_bs: 512  # the old batch size
  # The benchmark keeps its own comment.
  sglang-stacks:benchmark:
    output_len: 512
    input_len: 1024
"""


def test_comments_around_a_replaced_or_removed_section_and_the_key_order_survive(stacks_dir: Path) -> None:
    (stacks_dir / "Pulumi.commented.yaml").write_text(COMMENTED)

    assert promote(stacks_dir, "baseline", "commented", "--yes") == 0

    text = (stacks_dir / "Pulumi.commented.yaml").read_text()
    # The draft model went (baseline has none); what introduced the server stays before it, and
    # the model's comments (one at a line's end, one inside) stay where they were.
    assert text == (
        "encryptionsalt: v1:c2FsdA==:v1:c2FsdHk=:c2FsdA==\n"
        "config:\n"
        "  sglang-stacks:host:\n"
        "    kind: emulator\n"
        "  sglang-stacks:model:\n"
        "    weights_per_gpu_gb: 72.33  # measured on the host, not the card's nominal size\n"
        "    # The path the host mounts.\n"
        "    path: /shared/kimi-k2.5-int4\n"
        "  # The draft model EAGLE-3 reads.\n"
        "  # Flags of the tuned server.\n"
        "  sglang-stacks:server:\n"
        "    tp_size: 8\n"
        "    trust_remote_code: true\n"
        "    port: 30000\n"
        "    cuda_graph_max_bs: 128\n"
        "  # The benchmark keeps its own comment.\n"
        "  sglang-stacks:benchmark:\n"
        "    output_len: 512\n"
        "    input_len: 1024\n"
    )
    assert list(config_of(stacks_dir / "Pulumi.commented.yaml")) == [
        "sglang-stacks:host",
        "sglang-stacks:model",
        "sglang-stacks:server",
        "sglang-stacks:benchmark",
    ]
