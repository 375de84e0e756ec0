"""Hardware profiles: the shipped default is the campaign's host, and bad files name the bad key."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from sglang_emulator.profile import ProfileError
from sglang_emulator.profile_loading import DEFAULT_PROFILE, load_profile, shipped_profiles
from sglang_emulator.tokenizer import GENERATED_WORDS, count_tokens, encode


def shipped_raw() -> dict[str, object]:
    text = resources.files("sglang_emulator").joinpath("profiles", f"{DEFAULT_PROFILE}.json").read_text()
    raw: dict[str, object] = json.loads(text)
    return raw


def write(tmp_path: Path, raw: object) -> str:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(raw))
    return str(path)


def test_default_profile_is_the_campaign_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_EMULATOR_PROFILE", raising=False)
    profile = load_profile()
    assert profile.name == DEFAULT_PROFILE
    assert (profile.host.gpu_count, profile.host.memory_total_mib) == (8, 97887)
    assert (profile.host.compute_capability, profile.host.interconnect) == ("12.0", "pcie")
    assert profile.model.weights_gib_total / 8 == pytest.approx(72.33)
    assert profile.sglang_release == "0.5.8"
    assert set(shipped_profiles()) >= {DEFAULT_PROFILE, "h200-1gpu-llama-3.1-8b"}


def test_profile_from_environment_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = shipped_raw()
    raw["name"] = "my-host"
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", write(tmp_path, raw))
    assert load_profile().name == "my-host"


def test_unknown_key_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    raw = shipped_raw()
    raw["host"] = {**raw["host"], "gpu_modle": "x"}  # type: ignore[dict-item]
    with pytest.raises(ProfileError, match=r"'host.gpu_modle' is unknown; allowed under 'host': .*gpu_name"):
        load_profile(write(tmp_path, raw))


def test_missing_and_mistyped_keys_are_named(tmp_path: Path) -> None:
    raw = shipped_raw()
    del raw["random_seed"]
    with pytest.raises(ProfileError, match="'random_seed' is missing"):
        load_profile(write(tmp_path, raw))
    raw = shipped_raw()
    raw["performance"] = {**raw["performance"], "decode_compute_ms": "fast"}  # type: ignore[dict-item]
    with pytest.raises(ProfileError, match=r"'performance.decode_compute_ms' must be float, got 'fast'"):
        load_profile(write(tmp_path, raw))


def test_missing_file_and_unknown_shipped_name(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="Cannot read the emulator profile"):
        load_profile(str(tmp_path / "absent.json"))
    with pytest.raises(ProfileError, match="no shipped emulator profile named 'dgx'"):
        load_profile("dgx")


def test_fake_tokenizer_counts_four_character_pieces_and_round_trips_outputs() -> None:
    assert count_tokens("The capital of France is") == 7
    assert encode("hello", 1000) == encode("hello", 1000)
    generated = "".join(" " + w for w in GENERATED_WORDS)
    assert count_tokens(generated) == len(GENERATED_WORDS)


def test_public_surface_is_sorted_and_importable() -> None:
    import sglang_emulator

    assert sglang_emulator.__all__ == sorted(sglang_emulator.__all__)
    assert all(hasattr(sglang_emulator, name) for name in sglang_emulator.__all__)
