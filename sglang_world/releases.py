"""Which memory rules each shipped SGLang release follows.

Releases change their rules a little at a time: each entry is the one before it with what that
release changed. The rows each release's own code resolved (``recorded/``) are what these
entries are checked against, point by point (``tests/test_world_releases.py``).
"""

from __future__ import annotations

from dataclasses import replace

from sglang_flags import release_key
from sglang_world.rules import INF, CaptureRule, GpuTier, PiecewiseRule, ReserveRule, Rules, RuntimeCapture

__all__ = ["RELEASE_RULES", "judged_releases", "rules_for"]

_SPECULATIVE_0_5_1 = ((1, 9, 1), (10, 33, 2), (40, 64, 8), (80, 161, 16))
_RUNTIME_0_5_1 = RuntimeCapture(
    plain=((1, 2, 1), (2, 3, 1), (4, 5, 1), (8, 9, 1), (16, 161, 8)),
    plain_no_padding=((1, 33, 1), (48, 161, 16)),
    speculative=_SPECULATIVE_0_5_1,
    larger_gpus=((90 * 1024, (160, 257, 8)), (160 * 1000, (256, 513, 16))),
)
# 0.5.1 and 0.5.2 reserve by GPU tier: (fixed GiB, GiB per tensor/pipeline rank).
_0_5_1 = Rules(
    tiers=(
        GpuTier(20, 2048, 8, 80, reserve_gib=2.8, reserve_gib_per_rank=0.1),
        GpuTier(35, 2048, 8, 80, reserve_gib=2.8, reserve_gib_per_rank=0.1),
        GpuTier(90, 8192, None, None, reserve_gib=9.5, reserve_gib_per_rank=0.5),
        GpuTier(160, 8192, None, None, reserve_gib=12, reserve_gib_per_rank=0.5),
        GpuTier(INF, 16384, None, None, reserve_gib=32),
    ),
    capture=None,
    runtime_capture=_RUNTIME_0_5_1,
    reserve_by_tier=True,
    reserve=ReserveRule(speculative_mib=(), default_speculative_mib=2 * 1024, dp_attention_mib=4 * 1024),
)

_SMALL = ((1, 2, 1), (2, 3, 1), (4, 5, 1), (8, 9, 1), (12, 13, 1))
# 0.5.2 adds STANDALONE, with a larger draft reserve (and does not refuse it with attention DP).
_0_5_2 = replace(
    _0_5_1,
    reserve=replace(_0_5_1.reserve, speculative_mib=(("STANDALONE", 6 * 1024),)),
    speculative_refuses_dp=(),
)
_0_5_3 = Rules(
    tiers=(
        GpuTier(20, 2048, 8, 8),
        GpuTier(35, 2048, 16, 80),
        GpuTier(60, 4096, 32, 160),
        GpuTier(90, 8192, 256, 512),
        GpuTier(160, 8192, 256, 512),
        GpuTier(INF, 16384, 512, 512),
    ),
    capture=CaptureRule(
        plain=(*_SMALL, (16, 257, 8), (272, 512, 16), (512, None, 32)),
        speculative=((1, 9, 1), (10, 33, 2), (40, 64, 4), (72, 257, 8), (272, None, 16)),
        append_max=False,
    ),
)
_0_5_4_POST1 = replace(
    _0_5_3, tiers=tuple(replace(t, cuda_graph_max_bs=24) if t.below_gib == 35 else t for t in _0_5_3.tiers)
)
_CAPTURE_0_5_4_POST2 = CaptureRule(
    plain=(*_SMALL, (16, 257, 8), (272, 512, 16), (512, None, 32)),
    speculative=((1, 9, 1), (10, 33, 2), (40, 65, 4), (72, 257, 8), (272, None, 16)),
    append_max=False,
)
_0_5_4_POST2 = replace(_0_5_4_POST1, capture=_CAPTURE_0_5_4_POST2)
_PIECEWISE_0_5_5_POST1 = PiecewiseRule(
    segments=((4, 33, 4), (48, 257, 16), (288, 513, 32), (640, 4097, 128), (4352, None, 256)),
    reserve="quarter_of_max",
)
_0_5_5_POST1 = replace(_0_5_4_POST2, piecewise=_PIECEWISE_0_5_5_POST1)
_0_5_7 = replace(_0_5_5_POST1, piecewise=replace(_PIECEWISE_0_5_5_POST1, reserve="eighth_of_max"))
_0_5_8 = replace(
    _0_5_7,
    piecewise=PiecewiseRule(
        segments=(
            (4, 33, 4),
            (48, 257, 16),
            (288, 513, 32),
            (640, 1025, 64),
            (1280, 4097, 256),
            (4608, None, 512),
        ),
        reserve="per_size",
        mla_max_tokens=2048,
    ),
)
_PIECEWISE_0_5_9 = PiecewiseRule(
    segments=(
        (4, 33, 4),
        (48, 257, 16),
        (288, 513, 32),
        (576, 1025, 64),
        (1280, 4097, 256),
        (4608, None, 512),
    ),
    reserve="per_size",
    mla_max_tokens=2048,
)
_0_5_9 = replace(_0_5_8, piecewise=_PIECEWISE_0_5_9)
# Prefill graphs on by default (latent attention reserves a flat 1.5 GiB for them); the EAGLE
# family's draft reserve doubles; the max batch size itself is always captured.
_0_5_10 = replace(
    _0_5_9,
    capture=replace(_CAPTURE_0_5_4_POST2, append_max=True),
    piecewise=replace(
        _PIECEWISE_0_5_9,
        on_by_default=True,
        mla_reserve_mib=1.5 * 1024,
        off_when=("speculative", "dp_attention", "multimodal", "pipeline", "moe_a2a"),
    ),
    reserve=ReserveRule(default_speculative_mib=4 * 1024),
)
_PIECEWISE_0_5_11 = replace(
    _0_5_10.piecewise or _PIECEWISE_0_5_9, off_when=("dp_attention", "multimodal", "pipeline", "moe_a2a")
)
# Speculative decoding no longer turns prefill graphs off.
_0_5_11 = replace(_0_5_10, piecewise=_PIECEWISE_0_5_11)
_0_5_13 = replace(_0_5_11, piecewise=replace(_PIECEWISE_0_5_11, capped_by_context=True))
# The draft's reserve leaves the automatic fraction.
_0_5_14 = replace(_0_5_13, reserve=ReserveRule(speculative_mib=(), default_speculative_mib=0.0))
# Prefill graphs are off for latent attention too; decode graphs are reserved only when on.
_0_5_15 = replace(
    _0_5_14,
    graphs_reserved_when_disabled=False,
    piecewise=replace(
        _0_5_14.piecewise or _PIECEWISE_0_5_9,
        off_when=("dp_attention", "multimodal", "mla", "pipeline", "moe_a2a"),
    ),
)
# Prefill graphs are breakable by default: attention DP and the validated all-to-all backends
# (DeepEP, MegaMoE, FlashInfer) keep them on.
_0_5_17 = replace(
    _0_5_15,
    piecewise=replace(
        _0_5_15.piecewise or _PIECEWISE_0_5_9,
        capped_by_context=False,
        off_when=("multimodal", "mla", "moe_a2a_unvalidated"),
    ),
)
# Latent attention keeps its prefill graphs again (and their 1.5 GiB reserve).
_0_5_18 = replace(
    _0_5_17,
    piecewise=replace(_0_5_17.piecewise or _PIECEWISE_0_5_9, off_when=("multimodal", "moe_a2a_unvalidated")),
)
_0_5_20 = replace(
    _0_5_18,
    tiers=tuple(
        replace(t, chunked_prefill_size=4096, cuda_graph_max_bs=48, cuda_graph_max_bs_large_tp=160)
        if t.below_gib == 35
        else t
        for t in _0_5_17.tiers
    ),
)
_0_5_22 = replace(_0_5_20, graph_bs_capped_by_running_requests=True)
_0_5_23 = replace(
    _0_5_22,
    piecewise=replace(_0_5_22.piecewise or _PIECEWISE_0_5_9, mla_max_tokens=8192, mla_capped_by_chunk=True),
)

RELEASE_RULES: dict[str, Rules] = {
    **dict.fromkeys(("0.5.1", "0.5.1.post1", "0.5.1.post2", "0.5.1.post3"), _0_5_1),
    **dict.fromkeys(("0.5.2",), _0_5_2),
    **dict.fromkeys(("0.5.3", "0.5.3.post1", "0.5.3.post2", "0.5.3.post3", "0.5.4"), _0_5_3),
    **dict.fromkeys(("0.5.4.post1",), _0_5_4_POST1),
    **dict.fromkeys(("0.5.4.post2", "0.5.4.post3", "0.5.5"), _0_5_4_POST2),
    **dict.fromkeys(
        ("0.5.5.post1", "0.5.5.post2", "0.5.5.post3", "0.5.6", "0.5.6.post1", "0.5.6.post2"), _0_5_5_POST1
    ),
    **dict.fromkeys(("0.5.7",), _0_5_7),
    **dict.fromkeys(("0.5.8", "0.5.8.post1"), _0_5_8),
    **dict.fromkeys(("0.5.9",), _0_5_9),
    **dict.fromkeys(("0.5.10", "0.5.10.post1"), _0_5_10),
    **dict.fromkeys(("0.5.11", "0.5.12", "0.5.12.post1"), _0_5_11),
    **dict.fromkeys(("0.5.13", "0.5.13.post1"), _0_5_13),
    **dict.fromkeys(("0.5.14",), _0_5_14),
    **dict.fromkeys(("0.5.15", "0.5.15.post1", "0.5.16"), _0_5_15),
    **dict.fromkeys(("0.5.17",), _0_5_17),
    **dict.fromkeys(("0.5.18", "0.5.19"), _0_5_18),
    **dict.fromkeys(("0.5.20", "0.5.21"), _0_5_20),
    **dict.fromkeys(("0.5.22",), _0_5_22),
    **dict.fromkeys(("0.5.23",), _0_5_23),
}
"""The rules of every release the project judges."""


def rules_for(release: str) -> Rules | None:
    """The rules ``release`` follows; None when the project does not know them."""
    return RELEASE_RULES.get(release)


def judged_releases() -> list[str]:
    """Releases whose rules the project knows, oldest first."""
    return sorted(RELEASE_RULES, key=release_key)
