"""What an SGLang release decides about GPU memory, its KV pool and scheduling, per release.

One model, shared by preflight (``sglang_stacks``) and the emulator (``sglang_emulator``, which
carries this package to its hosts; stdlib only). Memory: ``resolve_settings`` gives what a release
resolves from its launch flags and the GPU (the automatic ``mem_fraction_static``, chunked
prefill, captured batch sizes, running requests) by the project's rules for that release
(``releases.py``), each checked against what the release's own code resolves over a grid
(``recorded/``, written by ``python -m sglang_world.record``); ``plan_memory`` fills one GPU phase by
phase and says whether and where the server fails. Scheduling (``scheduling.py``): the numbers each
release's own code holds, recorded from its wheel (``python -m sglang_world.record_scheduling``).
"""

from sglang_world.budget import Budget
from sglang_world.facts import (
    DEFAULT_DRIVER_RESERVED_MIB,
    DEFAULT_RUNTIME_MIB,
    DeviceFacts,
    DraftFacts,
    Launch,
    ModelFacts,
)
from sglang_world.failures import GRAPH_CAPTURE_HINTS, Failure, Phase, input_too_long, out_of_memory
from sglang_world.kv import KvCell
from sglang_world.memory import (
    MemoryPlan,
    Verdict,
    Workload,
    fitting_fractions,
    plan_memory,
    resolve_settings,
    unjudged_reason,
)
from sglang_world.releases import judged_releases
from sglang_world.settings import ModelKind, ServerSettings

__all__ = [
    "DEFAULT_DRIVER_RESERVED_MIB",
    "DEFAULT_RUNTIME_MIB",
    "GRAPH_CAPTURE_HINTS",
    "Budget",
    "DeviceFacts",
    "DraftFacts",
    "Failure",
    "KvCell",
    "Launch",
    "MemoryPlan",
    "ModelFacts",
    "ModelKind",
    "Phase",
    "ServerSettings",
    "Verdict",
    "Workload",
    "fitting_fractions",
    "input_too_long",
    "judged_releases",
    "out_of_memory",
    "plan_memory",
    "resolve_settings",
    "unjudged_reason",
]
