"""Judgement by execution: what a release's own code resolves for one launch command.

The release's wheel (downloaded with pip once, cached, never installed) runs in a child interpreter
(``_execute_child.py``) on a stand-in machine of the host's GPUs, with the model's ``config.json``
facts: its parser reads the command and its ``ServerArgs`` resolves it (the automatic
``mem_fraction_static``, chunked prefill, the decode CUDA-graph sizes, ``max_running_requests``), or
raises what SGLang raises at that step ("Flashinfer MoE A2A requires --attn-dp-size equal to
--tp-size"). Answers are kept on disk by their question, so a stack judged once is judged again
without a child; a question the code could not answer (no wheel offline) says why.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from sglang_world._execute_kept import keep, kept, name
from sglang_world.budget import free_at_start_gib, loaded_gib
from sglang_world.facts import DeviceFacts, Launch, ModelFacts
from sglang_world.recorded_store import captured_sizes
from sglang_world.settings import ServerSettings

__all__ = ["Answer", "Machine", "Question", "draft_layers", "execute", "measured", "server_environment"]

_CHILD_TIMEOUT_S = 600
_CLASS = re.compile(r"^class (\w+)\(", re.MULTILINE)


@dataclass(frozen=True)
class Machine:
    """The GPUs the release's code sees: the host's count, memory, model and compute capability."""

    gpu_mib: int
    """``memory.total`` as nvidia-smi prints it."""
    gpu_count: int
    gpu_name: str
    capability: tuple[int, int]
    sms: int = 132

    @classmethod
    def of(cls, gpu_mib: int, gpu_count: int, gpu_name: str, compute_capability: str) -> Machine:
        """The machine of a host's declared facts (its compute capability as written: ``"12.0"``)."""
        major, minor = (int(part) for part in compute_capability.split("."))
        return cls(gpu_mib, gpu_count, gpu_name, (major, minor))


@dataclass(frozen=True)
class Question:
    """One launch command of one release, on one machine, for one model."""

    argv: tuple[str, ...]
    """The launch flags as the server gets them (``--tp-size 8 ...``)."""
    model_config: Mapping[str, Any]
    """The model's ``config.json`` (the keys the release reads)."""
    machine: Machine
    environment: tuple[tuple[str, str], ...] = ()
    """The server's environment (sorted pairs): ``SGLANG_*`` variables change what is resolved."""
    memory: tuple[float, float] | None = None
    """One GPU's free memory (GiB) when SGLang first measures it and once the weights (target and
    draft) are loaded: with them, the release's own pool code sizes the KV cache's budget."""
    draft_layers: int | None = None
    """The draft model's layers that keep a KV cache (an EAGLE draft's KV lives in the target's pool
    cell); None without a draft model."""
    draft_weights_gib: float | None = None
    """The draft model's weights in ``memory``'s loaded measurement; None without a draft model. A
    release that sizes the target's pool before it loads the draft (to 0.5.13) measured them free."""

    @classmethod
    def of(
        cls,
        argv: Sequence[str],
        model_config: Mapping[str, Any],
        machine: Machine,
        environment: Mapping[str, str],
        launch: Launch,
        model: ModelFacts,
        device: DeviceFacts,
    ) -> Question:
        """The question of a launch command of ``model`` on ``device``, as preflight and the emulator
        ask it: the server's ``SGLANG_*`` environment, the free memory before and after loading, and
        the draft's KV layers and weights."""
        memory, layers = measured(launch, model, device), draft_layers(launch, model)
        drafted = model.draft.weights_gib if launch.has_draft_model and model.draft else None
        return cls(
            tuple(argv), model_config, machine, server_environment(environment), memory, layers, drafted
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "model_config": dict(self.model_config),
            "environment": dict(self.environment),
        }


@dataclass(frozen=True)
class Answer:
    """What the release's code resolved, what it raised, or why it did not run."""

    release: str
    settings: ServerSettings | None = None
    """The resolved memory settings (with the release's refusal, when it raised); None when it did
    not run."""
    refusal: str | None = None
    """What the release raised while resolving, in its words (``AssertionError: ...``)."""
    not_run: str | None = None
    """Why the release's code could not be run (no wheel offline, a child that died)."""
    unserved: bool = False
    """The release has no model class for the model (``not_run`` says so in its words): it stops at
    start, and its settings for the model would not be a served model's."""
    pool_not_run: str | None = None
    """Why the release's pool code was not run for the KV budget though its settings were resolved."""
    pool_sizes_not_run: str | None = None
    """Why the release's pool code did not size the pool in tokens (a pipeline, an unknown cache dtype)."""


def server_environment(environment: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The server's ``SGLANG_*`` variables (sorted pairs) a release's code reads while resolving;
    the emulator's own (``SGLANG_EMULATOR_*``) are not SGLang's."""
    ours = {name for name in environment if name.startswith("SGLANG_EMULATOR_")}
    return tuple(sorted((n, v) for n, v in environment.items() if n.startswith("SGLANG_") and n not in ours))


def measured(launch: Launch, model: ModelFacts, device: DeviceFacts) -> tuple[float, float]:
    """``Question.memory`` for a launch: free when SGLang first measures, and once loaded (GiB,
    four decimals, so preflight and the emulator ask the same question of the same facts)."""
    return round(free_at_start_gib(device), 4), round(loaded_gib(launch, model, device), 4)


def draft_layers(launch: Launch, model: ModelFacts) -> int | None:
    """``Question.draft_layers`` for a launch of ``model``."""
    draft = model.draft
    if not launch.has_draft_model or draft is None or draft.kv is None:
        return None
    return draft.kv.layers


def _settings(release: str, question: Question, resolved: dict[str, Any]) -> ServerSettings:
    return ServerSettings(
        release=release,
        mem_fraction_static=resolved["mem_fraction_static"],
        fraction_source="set" if "--mem-fraction-static" in question.argv else "auto",
        chunked_prefill_size=resolved["chunked_prefill_size"],
        max_prefill_tokens=resolved["max_prefill_tokens"],
        cuda_graph_max_bs=resolved["cuda_graph_max_bs"],
        cuda_graph_bs=tuple(captured_sizes(resolved)),
        cuda_graph_disabled=resolved["cuda_graph_disabled"],
        max_running_requests=resolved["max_running_requests"],
        executed=True,
    )


def _refused(release: str, question: Question, error: str) -> ServerSettings:
    """What a refusal plans with: the release's words; the other fields are moot."""
    kind, _, message = error.partition(": ")
    return ServerSettings(
        release=release,
        mem_fraction_static=0.0,
        fraction_source="set" if "--mem-fraction-static" in question.argv else "auto",
        chunked_prefill_size=0,
        max_prefill_tokens=0,
        cuda_graph_max_bs=None,
        cuda_graph_bs=(),
        cuda_graph_disabled=False,
        max_running_requests=None,
        refusal=message or kind,
        refusal_class=kind if message else "Error",
        executed=True,
    )


def _answer(release: str, question: Question, raw: dict[str, Any]) -> Answer:
    if "error" in raw:
        return Answer(release, settings=_refused(release, question, raw["error"]), refusal=raw["error"])
    if "not_run" in raw:
        return Answer(release, not_run=raw["not_run"])
    if "shortfall" in raw:
        return Answer(release, not_run=f"SGLang {release}'s code could not resolve it: {raw['shortfall']}")
    if "unserved" in raw:
        return Answer(release, not_run=raw["unserved"], unserved=True)
    settings = replace(
        _settings(release, question, raw["resolved"]),
        kv_budget_gib=raw.get("kv_budget_gib"),
        kv_budget_by_step=tuple(raw.get("kv_budget_by_step", ())),
        pool_refusal=raw.get("pool_error"),
        kv_tokens=raw.get("kv_tokens"),
        running_limit=raw.get("running_limit"),
        request_slots=raw.get("request_slots"),
        draft_after_pool=raw.get("draft_after_pool", False),
    )
    unsized = raw.get("pool_sizes_not_run")
    return Answer(
        release, settings=settings, pool_not_run=raw.get("pool_not_run"), pool_sizes_not_run=unsized
    )


def served_architectures(release_dir: Path) -> set[str]:
    """The model classes the release registers (a class defined in a ``sglang/srt/models`` module
    that lists ``EntryClass``): what its model registry can load."""
    served: set[str] = set()
    for module in (release_dir / "sglang" / "srt" / "models").glob("*.py"):
        text = module.read_text(encoding="utf-8", errors="replace")
        if "EntryClass" in text:
            served.update(_CLASS.findall(text))
    return served


def _unserved(release: str, question: Question, served: set[str]) -> str | None:
    """Why the release cannot serve the question's model at all, in its words; None when it can."""
    architectures = list(question.model_config.get("architectures") or [])
    if not architectures or any(name in served for name in architectures):
        return None
    return (
        f"SGLang {release} has no model class for {', '.join(architectures)}: it stops at start with "
        f'"ValueError: Model architectures {architectures} are not supported for now", so its settings '
        "for this model are not a served model's"
    )


def _ask(release: str, questions: Sequence[Question], wheels: Path) -> list[dict[str, Any]]:
    """The children's raw answers, one child per machine asked about, or one ``not_run`` for each
    question when the release's wheel cannot be had."""
    from sglang_flags.wheels import EXECUTION_HELPERS, WheelError, unpacked_helpers, unpacked_release

    try:
        release_dir = unpacked_release(release, wheels)
        helpers = unpacked_helpers(wheels, EXECUTION_HELPERS)
    except WheelError as error:
        return [{"not_run": f"SGLang {release}'s code could not be run: {error}"}] * len(questions)
    served = served_architectures(release_dir)
    # A release reads the machine's facts (the GPU's SM version above all) at import and caches
    # them: each machine gets a child of its own that sees it from the start.
    by_machine: dict[Machine, list[int]] = {}
    for index, question in enumerate(questions):
        by_machine.setdefault(question.machine, []).append(index)
    answers: list[dict[str, Any]] = [{} for _ in questions]
    for indices in by_machine.values():
        asked = [questions[index] for index in indices]
        for index, answer in zip(
            indices, _ask_one_machine(release, asked, release_dir, helpers, served), strict=True
        ):
            answers[index] = answer
    return answers


def _ask_one_machine(
    release: str, questions: Sequence[Question], release_dir: Path, helpers: Sequence[Path], served: set[str]
) -> list[dict[str, Any]]:
    """One child's raw answers to questions about one machine, or one ``not_run`` each when it gave none."""
    from sglang_flags.release_child import run_release_child

    unserved = [_unserved(release, question, served) for question in questions]
    if all(unserved):
        return [{"unserved": why} for why in unserved]
    with tempfile.TemporaryDirectory(prefix="sglang-execute-") as scratch:
        asked = Path(scratch) / "questions.json"
        asked.write_text(json.dumps([q.as_dict() for q in questions]), encoding="utf-8")
        run = run_release_child(
            "sglang_world._execute_child",
            release_dir,
            helpers,
            timeout_s=_CHILD_TIMEOUT_S,
            doing="resolving the launch command",
            env={"SGLANG_WORLD_EXECUTE_QUESTIONS": str(asked)},
            asserts=True,
        )
    result = run.result or {"refused": [run.failure]}
    if result.get("refused"):
        why = f"SGLang {release}'s code could not be set up: {result['refused'][0]}"
        return [{"not_run": why}] * len(questions)
    return [
        {"unserved": why} if why else answer for why, answer in zip(unserved, result["answers"], strict=True)
    ]


def execute(release: str, questions: Sequence[Question], wheels: Path | None = None) -> list[Answer]:
    """What ``release``'s own code resolves for each question, in order: kept answers are read back,
    the others asked of one child interpreter together (a child takes a few seconds to start)."""
    from sglang_flags.wheels import default_cache

    wheels = wheels or default_cache()
    kept_in = wheels.parent / "executed"
    keys = [name(release, question.as_dict()) for question in questions]
    raw: dict[str, dict[str, Any]] = {}
    for key in keys:
        found = kept(kept_in, key)
        if found is not None:
            raw[key] = found
    missing = [(key, q) for key, q in zip(keys, questions, strict=True) if key not in raw]
    if missing:
        for (key, _), answer in zip(missing, _ask(release, [q for _, q in missing], wheels), strict=True):
            raw[key] = answer
            if "not_run" not in answer:  # a release that could not run may run next time
                keep(kept_in, key, answer)
    return [_answer(release, question, raw[key]) for key, question in zip(keys, questions, strict=True)]
