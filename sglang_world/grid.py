"""The configurations every release's own memory code is run over, and the stand-in models it sees.

The grid is what the recorded tables cover and what the per-release test compares the project's
rules with: GPU memory x tensor parallelism x chunked prefill x CUDA-graph batch x speculative
algorithm x attention data parallelism x model. Points are numbered in one fixed order, so a
recorded table holds rows only, and a row's configuration is ``GRID[i]``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from sglang_world.facts import Launch
from sglang_world.models import KIMI_K2_TEXT, LLAMA_3_1_8B
from sglang_world.settings import ModelKind

__all__ = ["GRID", "STAND_IN_MODELS", "GridPoint", "StandInModel", "argv_of", "launch_of", "model_kind_of"]

GPU_MIB = (24564, 49140, 81559, 97887, 143771, 183359)
"""``memory.total`` of an RTX 4090 (24 GB), L40S (48 GB), H100 (80 GB), RTX PRO 6000 (96 GB),
H200 (141 GB) and B200 (192 GB), as nvidia-smi prints it."""
TP_SIZES = (1, 2, 4, 8)
CHUNKED_PREFILL = (None, 4096, 16384, -1)
"""Unset (the release picks by GPU memory), two sizes, and chunking off."""
CUDA_GRAPH_MAX_BS = (None, 100, 512)
SPECULATIVE = (None, "EAGLE", "EAGLE3", "STANDALONE", "NGRAM")
DRAFT_SHAPE = (2, 4, 4)
"""Steps, top-k and draft tokens of a speculative point (the campaign's EAGLE-3 run)."""


@dataclass(frozen=True)
class StandInModel:
    """A model's ``config.json`` as the release reads it, and what the project's rules see of it."""

    name: str
    hf_config: dict[str, Any]
    """The configuration SGLang's model config is built from."""
    mla: bool
    """Whether attention is multi-head latent (DeepSeek-V3 family): one latent per layer."""
    vision: tuple[int, int] | None
    """The vision tower's layers and hidden size, for a multimodal model."""


_QWEN2_5_VL_7B: dict[str, Any] = {
    "model_type": "qwen2_5_vl",
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128000,
    "vocab_size": 152064,
    "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16",
    "vision_config": {"model_type": "qwen2_5_vl", "num_hidden_layers": 32, "hidden_size": 1280},
}

STAND_IN_MODELS = (
    StandInModel(name="mha-text", hf_config=LLAMA_3_1_8B, mla=False, vision=None),
    StandInModel(name="mha-vision", hf_config=_QWEN2_5_VL_7B, mla=False, vision=(32, 1280)),
    StandInModel(name="mla-text", hf_config=KIMI_K2_TEXT, mla=True, vision=None),
    StandInModel(
        name="mla-vision",
        hf_config={
            "model_type": "kimi_vl",
            "architectures": ["KimiVLForConditionalGeneration"],
            "text_config": KIMI_K2_TEXT,
            "vision_config": {"model_type": "moonvit", "num_hidden_layers": 27, "hidden_size": 1152},
            "torch_dtype": "bfloat16",
        },
        mla=True,
        vision=(27, 1152),
    ),
)
"""Four models every shipped release knows, attention and vision tower crossed: Llama-3.1-8B (text,
multi-head attention), Qwen2.5-VL-7B (a 32 x 1280 vision tower), DeepSeek-V3-shaped text with
Kimi-K2.5's dimensions (multi-head latent attention), and Kimi-VL-shaped (that text, a 27 x 1152
vision tower)."""


@dataclass(frozen=True)
class GridPoint:
    """One configuration: what the flags and the device say."""

    gpu_mib: int
    tp_size: int
    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    speculative_algorithm: str | None
    dp_attention: bool
    """Attention data parallelism as wide as the tensor parallelism."""
    model: str
    """A ``STAND_IN_MODELS`` name."""

    def as_dict(self) -> dict[str, Any]:
        """The point as JSON."""
        return {
            "gpu_mib": self.gpu_mib,
            "tp_size": self.tp_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "speculative_algorithm": self.speculative_algorithm,
            "dp_attention": self.dp_attention,
            "model": self.model,
        }


def _points() -> tuple[GridPoint, ...]:
    points = []
    for model, gpu, tp, chunk, graph_bs, algorithm, dp in itertools.product(
        STAND_IN_MODELS, GPU_MIB, TP_SIZES, CHUNKED_PREFILL, CUDA_GRAPH_MAX_BS, SPECULATIVE, (False, True)
    ):
        if dp and tp == 1:
            continue  # attention DP of width 1 is no DP at all
        points.append(GridPoint(gpu, tp, chunk, graph_bs, algorithm, dp, model.name))
    return tuple(points)


GRID = _points()
"""Every recorded configuration, in table order."""


def launch_of(point: GridPoint) -> Launch:
    """The point's launch flags as the project's rules read them."""
    speculating = point.speculative_algorithm is not None and point.speculative_algorithm != "NGRAM"
    return Launch(
        tp_size=point.tp_size,
        attn_dp_size=point.tp_size if point.dp_attention else 1,
        chunked_prefill_size=point.chunked_prefill_size,
        cuda_graph_max_bs=point.cuda_graph_max_bs,
        speculative_algorithm=point.speculative_algorithm,
        speculative_num_draft_tokens=DRAFT_SHAPE[2] if speculating else None,
    )


def model_kind_of(point: GridPoint) -> ModelKind:
    """What the release's settings see of the point's stand-in model."""
    model = next(m for m in STAND_IN_MODELS if m.name == point.model)
    return ModelKind(mla=model.mla, vision=model.vision)


def argv_of(point: GridPoint, options: set[str]) -> list[str]:
    """The launch command of ``point`` for a release whose parser has ``options``."""
    argv = ["--model-path", f"/models/{point.model}", "--device", "cuda", "--trust-remote-code"]
    argv += ["--tp-size", str(point.tp_size)]
    if point.chunked_prefill_size is not None:
        argv.append(f"--chunked-prefill-size={point.chunked_prefill_size}")
    if point.cuda_graph_max_bs is not None:
        name = (
            "--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in options else "--cuda-graph-max-bs"
        )
        argv += [name, str(point.cuda_graph_max_bs)]
    if point.speculative_algorithm is not None:
        argv += ["--speculative-algorithm", point.speculative_algorithm]
        if point.speculative_algorithm != "NGRAM":
            steps, topk, tokens = DRAFT_SHAPE
            argv += ["--speculative-draft-model-path", "/models/draft"]
            argv += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk)]
            argv += ["--speculative-num-draft-tokens", str(tokens)]
    if point.dp_attention:
        if "--attn-dp-size" in options:
            argv += ["--attn-dp-size", str(point.tp_size)]
        else:
            argv += ["--enable-dp-attention", "--dp-size", str(point.tp_size)]
    return argv
