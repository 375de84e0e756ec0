"""Which code of each release sizes its KV pool, and where it handles prefill/decode disaggregation,
read from its wheel, and what that means for the plan.

    python -m sglang_world.pool_code --all        # every release with a flag table (wheels cached)
    python -m sglang_world.pool_code 0.5.24       # add one release

The plan's KV arithmetic (``budget.py``) is SGLang 0.5.8's ``profile_max_num_token``, checked
against 0.5.8's own code. A release that sizes its pool with that function keeps it; one that sizes
it with a configurator class (``MemoryPoolConfigurator``, then ``KVCacheConfigurator``, which in
0.5.23 also charges a draft model's KV and a multimodal cache reservation to the pool, after the
draft's weights are loaded) is planned with 0.5.8's arithmetic as an approximation, and preflight
says so. Which one a release has is read from its wheel into
``pool_code.json``; nothing here retypes a release's numbers.

A worker of a disaggregated fleet is planned only on a release whose ``ServerArgs`` resolves the
memory settings (``_handle_gpu_memory_settings``) before it handles its role
(``_handle_pd_disaggregation``), which then turns a prefill worker's CUDA graphs off ("Cuda graph is
disabled for prefill server"): there a worker's plan is the aggregated one, a prefill worker's
without graphs. Whether a release does so is read from its ``server_args.py`` into the same file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path
from typing import Literal

from sglang_flags import known_releases, release_key

__all__ = [
    "PLANNED_WITH",
    "PoolCode",
    "main",
    "pd_after_memory_in",
    "pd_planned",
    "pool_approximation",
    "pool_code",
    "pool_code_in",
]

PoolCode = Literal["profile_max_num_token", "MemoryPoolConfigurator", "KVCacheConfigurator"]
PLANNED_WITH: PoolCode = "profile_max_num_token"
"""The pool code the plan's arithmetic is (SGLang 0.5.8's, checked against it)."""
RECORDED = Path(__file__).with_name("pool_code.json")
_DEFINITIONS: tuple[tuple[PoolCode, re.Pattern[str]], ...] = (
    ("KVCacheConfigurator", re.compile(r"^class KVCacheConfigurator\b", re.MULTILINE)),
    ("MemoryPoolConfigurator", re.compile(r"^class MemoryPoolConfigurator\b", re.MULTILINE)),
    ("profile_max_num_token", re.compile(r"^\s+def profile_max_num_token\(", re.MULTILINE)),
)
"""Each pool code by what defines it, newest first: a release that defines a newer one sizes with it."""


def pool_code_in(release_dir: Path) -> PoolCode | None:
    """The code that sizes the KV pool in an unpacked release (the newest of ``_DEFINITIONS`` it
    defines), or None when it defines none of them."""
    sources = sorted((release_dir / "sglang" / "srt").rglob("*.py"))
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in sources]
    for code, definition in _DEFINITIONS:
        if any(definition.search(text) for text in texts):
            return code
    return None


_MEMORY_CALL = re.compile(r"self\._handle_gpu_memory_settings\(")
_PD_CALL = re.compile(r"self\._handle_pd_disaggregation\(\)")
_PREFILL_GRAPHS_OFF = "Cuda graph is disabled for prefill server"


def pd_after_memory_in(release_dir: Path) -> bool:
    """Whether an unpacked release's ``ServerArgs`` resolves the memory settings before it handles a
    worker's role, then turns a prefill worker's CUDA graphs off (see the module's docstring)."""
    path = release_dir / "sglang" / "srt" / "server_args.py"
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    memory, role = _MEMORY_CALL.search(text), _PD_CALL.search(text)
    return bool(memory and role and memory.start() < role.start() and _PREFILL_GRAPHS_OFF in text)


def _document() -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return found


@cache
def _recorded() -> dict[str, PoolCode]:
    return dict(_document()["releases"])  # type: ignore[arg-type]


@cache
def _pd_recorded() -> dict[str, object]:
    return dict(_document().get("pd_after_memory_settings", {}))


def pd_planned(release: str) -> bool:
    """Whether the plan follows how ``release`` sizes a prefill or decode worker (read from its wheel)."""
    return bool(_pd_recorded().get(release))


def pool_code(release: str) -> PoolCode | None:
    """The release's pool code as recorded from its wheel; None for a release not recorded."""
    return _recorded().get(release)


def pool_approximation(release: str) -> str | None:
    """Why the plan's KV pool is not this release's own (a sentence), or None when it is."""
    code = pool_code(release)
    if code is None:
        return (
            f"SGLang {release}'s KV pool code was not read from its wheel (python -m "
            f"sglang_world.pool_code {release}): the plan's KV figures are SGLang 0.5.8's "
            "profile_max_num_token arithmetic, unchecked for this release."
        )
    if code == PLANNED_WITH:
        return None
    return (
        f"SGLang {release} sizes its KV pool with {code} (read from its wheel), which this plan does "
        "not run: the plan's KV figures are SGLang 0.5.8's profile_max_num_token arithmetic, an "
        f"approximation. {release}'s own pool can hold fewer tokens, and it can refuse to start where "
        "the plan says fits."
    )


def main(argv: list[str] | None = None) -> int:
    """Record the pool code of the releases named (or every release); exit 2 when a wheel is missing."""
    parser = argparse.ArgumentParser(prog="python -m sglang_world.pool_code", description=__doc__)
    parser.add_argument("releases", nargs="*", help="releases to read, e.g. 0.5.24")
    parser.add_argument("--all", action="store_true", help="every release with a flag table")
    parser.add_argument("--cache", type=Path, default=None, help="wheel cache")
    args = parser.parse_args(argv)
    # Only recording reads wheels: preflight and the emulator, which import this module, do not pay
    # for their helpers.
    from sglang_flags import wheels

    releases = known_releases() if args.all else args.releases
    if not releases:
        parser.error("name releases to read, or --all")
    found = dict(_recorded()) if RECORDED.exists() else {}
    roles: dict[str, object] = (
        dict(_document().get("pd_after_memory_settings", {})) if RECORDED.exists() else {}
    )
    for release in releases:
        try:
            tree = wheels.unpacked_release(release, args.cache or wheels.default_cache())
            code = pool_code_in(tree)
        except wheels.WheelError as error:
            print(f"error: SGLang {release}: {error}", file=sys.stderr)
            return 2
        if code is None:
            print(f"error: SGLang {release}: no KV pool code found in its wheel", file=sys.stderr)
            return 2
        roles[release] = pd_after_memory_in(tree)
        print(f"SGLang {release}: {code}; a PD worker planned: {roles[release]}", file=sys.stderr)
        found[release] = code
    document = {
        "about": "The code that sizes each release's KV pool, read from its wheel by python -m "
        "sglang_world.pool_code; do not edit by hand.",
        "releases": dict(sorted(found.items(), key=lambda item: release_key(item[0]))),
        "pd_after_memory_settings": dict(sorted(roles.items(), key=lambda item: release_key(item[0]))),
    }
    RECORDED.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
