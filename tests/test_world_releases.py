"""Every shipped release: the project's memory rules give what that release's own code resolved.

The rows in ``sglang_world/recorded/`` are what each release's ``ServerArgs`` resolved at every
point of the grid (GPU memory 24-192 GB, tp 1/2/4/8, chunked prefill unset/4096/16384/-1, CUDA-graph
max batch size unset/80/512, no speculation/EAGLE/EAGLE3/STANDALONE/NGRAM, attention DP off/on, a
text model with multi-head attention and a multimodal one with latent attention), recorded from its
wheel by ``python -m sglang_world.record``. The project's rules must give the same numbers.
"""

from __future__ import annotations

import pytest

from sglang_flags import known_releases
from sglang_world import judged_releases, resolve_settings
from sglang_world.grid import GRID, launch_of, model_kind_of
from sglang_world.recorded_store import (
    read_index,
    recorded_releases,
    recorded_rows,
    row_compared,
    settings_compared,
)


def test_every_shipped_release_is_recorded_or_named_with_why() -> None:
    index = read_index()
    assert set(recorded_releases()) | set(index["refused"]) == set(known_releases())
    for release, reasons in index["refused"].items():
        assert reasons, f"{release} is refused without a reason"


def test_the_project_judges_every_recorded_release() -> None:
    assert judged_releases() == recorded_releases()


@pytest.mark.parametrize("release", recorded_releases())
def test_the_rules_give_what_the_releases_own_code_resolves(release: str) -> None:
    mismatches: list[str] = []
    refused = 0
    for point, row in zip(GRID, recorded_rows(release), strict=True):
        settings = resolve_settings(release, launch_of(point), point.gpu_mib, model_kind_of(point))
        assert settings is not None
        if row.error is not None:
            refused += 1
            # SystemExit 2 is the release's parser refusing a flag value: the flag table says so
            # before the memory rules are asked (preflight's flag-unrenderable).
            if not (row.error == "SystemExit: 2" or (settings.refusal and settings.refusal in row.error)):
                mismatches.append(
                    f"{point}: the release raised {row.error!r}, the rules say {settings.refusal!r}"
                )
            continue
        assert row.values is not None
        ours, theirs = settings_compared(settings), row_compared(row.values)
        if settings.refusal is not None or ours != theirs:
            differing = {k: (ours[k], theirs[k]) for k in ours if ours[k] != theirs[k]}
            mismatches.append(f"{point}: (ours, the release's) {differing} refusal={settings.refusal!r}")
    assert not mismatches, f"{len(mismatches)} of {len(GRID)} points differ, e.g.:\n" + "\n".join(
        mismatches[:5]
    )
    assert refused < len(GRID)
