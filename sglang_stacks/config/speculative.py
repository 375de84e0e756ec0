"""Preflight's speculative-decoding rule: an algorithm needs its draft model and a draft-tree
shape SGLang keeps as set (it rewrites some shapes silently)."""

from __future__ import annotations

from collections.abc import Iterable

from sglang_stacks.config.findings import Finding, error, info, warning
from sglang_stacks.config.spec import StackSpec

# Algorithms that load a separate draft model (NEXTN uses the target's own MTP layers).
_NEEDS_DRAFT = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})


def speculative(spec: StackSpec, release: str) -> Iterable[Finding]:
    """Speculative decoding: an algorithm with its draft model and a shape SGLang keeps as set."""
    server = spec.server
    tuned = {
        "speculative_num_steps": server.speculative_num_steps,
        "speculative_eagle_topk": server.speculative_eagle_topk,
        "speculative_num_draft_tokens": server.speculative_num_draft_tokens,
    }
    if server.speculative_algorithm is None:
        yield from _without_algorithm(spec, [k for k, v in tuned.items() if v is not None])
    else:
        yield from _with_algorithm(spec, tuned)


def _without_algorithm(spec: StackSpec, given: list[str]) -> Iterable[Finding]:
    if given:
        yield error(
            "speculative-without-algorithm",
            f"server.{given[0]}",
            f"{', '.join(given)} are set but speculative_algorithm is not, so SGLang ignores them.",
            "Set speculative_algorithm, or remove them.",
        )
    if spec.draft_model is not None or spec.server.speculative_draft_model_path is not None:
        yield warning(
            "draft-unused",
            "draftModel",
            "A draft model is declared but speculative_algorithm is unset, so it is not used.",
            "Set speculative_algorithm (EAGLE3 for an EAGLE-3 head), or remove the draft model.",
        )


def _with_algorithm(spec: StackSpec, tuned: dict[str, int | None]) -> Iterable[Finding]:
    server = spec.server
    algorithm = server.speculative_algorithm
    given = [k for k, v in tuned.items() if v is not None]
    if algorithm in _NEEDS_DRAFT and spec.launch_flags().speculative_draft_model_path is None:
        yield error(
            "speculative-draft-missing",
            "server.speculative_draft_model_path",
            f"speculative_algorithm {algorithm} needs a draft model, and none is declared.",
            "Add a draftModel section (or set server.speculative_draft_model_path).",
        )
    if given and len(given) < len(tuned):
        missing = [k for k in tuned if k not in given]
        yield error(
            "speculative-partial",
            f"server.{missing[0]}",
            f"{', '.join(given)} are set but {', '.join(missing)} are not; SGLang needs all three or none.",
            "Set all of speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens, "
            "or none of them.",
        )
    yield from _shape(*tuned.values())
    if server.max_running_requests is None:
        yield info(
            "speculative-max-running-requests",
            "server.max_running_requests",
            "Speculative decoding sets max_running_requests to 48 when it is unset.",
            "Set max_running_requests to choose another limit.",
        )


def _shape(steps: int | None, topk: int | None, tokens: int | None) -> Iterable[Finding]:
    """The draft tree's shape: SGLang silently rewrites the draft tokens of a shape it rejects."""
    if steps is None or topk is None or tokens is None:
        return
    if topk == 1 and tokens != steps + 1:
        yield error(
            "speculative-topk1-tokens",
            "server.speculative_num_draft_tokens",
            f"With speculative_eagle_topk 1 the draft is a chain: SGLang replaces "
            f"speculative_num_draft_tokens {tokens} with steps + 1 = {steps + 1}.",
            f"Set speculative_num_draft_tokens to {steps + 1}.",
        )
    elif tokens > steps * topk + 1:
        yield error(
            "speculative-too-many-tokens",
            "server.speculative_num_draft_tokens",
            f"speculative_num_draft_tokens {tokens} exceeds what {steps} steps of top-{topk} can "
            f"draft (steps x topk + 1 = {steps * topk + 1}).",
            f"Set speculative_num_draft_tokens to at most {steps * topk + 1}.",
        )
