"""Which code sizes each release's KV pool, read from its wheel, and preflight saying when the plan's
KV figures are not that code's."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from sglang_flags import known_releases, release_key, wheels
from sglang_stacks.config.preflight import run_preflight
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_world import pool_code
from tests._stacks import STACKS_DIR


def _release_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sglang" / "srt" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_every_release_with_a_flag_table_has_its_pool_code_recorded_and_the_switch_happens_once() -> None:
    recorded = {release: pool_code.pool_code(release) for release in known_releases()}

    assert None not in recorded.values(), [release for release, code in recorded.items() if code is None]
    assert recorded["0.5.8"] == pool_code.PLANNED_WITH == "profile_max_num_token"
    assert recorded["0.5.23"] == "KVCacheConfigurator"
    # Releases in order: each pool code from one release to the next change, never back.
    codes = [recorded[release] for release in sorted(recorded, key=release_key)]
    runs = [code for code, _ in itertools.groupby(codes)]
    assert runs == ["profile_max_num_token", "MemoryPoolConfigurator", "KVCacheConfigurator"]


def test_the_pool_code_is_read_from_the_release_tree(tmp_path: Path) -> None:
    mixin = "class ModelRunnerKVCacheMixin:\n    def profile_max_num_token(self, total_gpu_memory):\n"
    configurator = "class KVCacheConfigurator:\n    def _resolve_memory_pool_config(self):\n"
    between = "class MemoryPoolConfigurator:\n    pass\n"

    older = _release_tree(tmp_path / "older", {"model_executor/model_runner_kv_cache_mixin.py": mixin})
    newer = _release_tree(tmp_path / "newer", {"mem_cache/kv_cache_configurator.py": configurator})
    middle = _release_tree(
        tmp_path / "middle", {"model_executor/pool_configurator.py": between, "x.py": mixin}
    )
    neither = _release_tree(
        tmp_path / "neither", {"utils.py": "# profile_max_num_token is named here only\n"}
    )

    assert pool_code.pool_code_in(older) == "profile_max_num_token"
    assert pool_code.pool_code_in(newer) == "KVCacheConfigurator"
    assert pool_code.pool_code_in(middle) == "MemoryPoolConfigurator"  # the newer code wins
    assert pool_code.pool_code_in(neither) is None


def test_recording_a_release_adds_it_and_keeps_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = tmp_path / "pool_code.json"
    recorded.write_text(json.dumps({"releases": {"0.5.8": "profile_max_num_token"}}))
    tree = _release_tree(
        tmp_path / "tree", {"mem_cache/kv_cache_configurator.py": "class KVCacheConfigurator:\n"}
    )
    monkeypatch.setattr(pool_code, "RECORDED", recorded)
    monkeypatch.setattr(wheels, "unpacked_release", lambda release, cache: tree)
    pool_code._recorded.cache_clear()
    try:
        assert pool_code.main(["0.5.24", "--cache", str(tmp_path)]) == 0
        written = json.loads(recorded.read_text())["releases"]
    finally:
        pool_code._recorded.cache_clear()

    assert written == {"0.5.8": "profile_max_num_token", "0.5.24": "KVCacheConfigurator"}


def test_the_plan_says_when_its_kv_figures_are_an_approximation() -> None:
    assert pool_code.pool_approximation("0.5.8") is None
    said = pool_code.pool_approximation("0.5.23")
    assert said is not None and "KVCacheConfigurator" in said and "approximation" in said
    unread = pool_code.pool_approximation("0.9.99")
    assert unread is not None and "python -m sglang_world.pool_code 0.9.99" in unread


def test_preflight_warns_of_an_approximated_kv_pool_on_the_release_that_has_one() -> None:
    spec = load_stack_spec("baseline", STACKS_DIR)

    newer = [f for f in run_preflight(spec, "0.5.23") if f.code == "kv-pool-approximated"]
    older = [f for f in run_preflight(spec, "0.5.8") if f.code == "kv-pool-approximated"]

    assert [(f.severity, f.key) for f in newer] == [("warning", "environment.sglang_release")]
    assert "KV Cache is allocated" in newer[0].fix
    assert older == []
