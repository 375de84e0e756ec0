"""The emulated server's settings from its release's own code, as preflight takes them.

When the profile names its model's public ``config.json`` (``model.config``), the release's own
``ServerArgs`` resolves the launch command on a stand-in machine of the profile's GPUs
(``sglang_world.execute``): the same question preflight asks for a stack on this host, so the two
read one kept answer. What the release refuses, the emulator refuses at start in its words.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglang_emulator.profile import Profile
from sglang_emulator.world import device_facts, model_facts
from sglang_world import Launch, ServerSettings
from sglang_world.execute import Answer, Machine, Question, execute
from sglang_world.models import PUBLIC_MODELS, public_model

__all__ = ["executed_settings", "resolution_note"]


def executed_settings(
    release: str, argv: list[str], launch: Launch, profile: Profile, environment: Mapping[str, str]
) -> Answer | None:
    """The release's own resolution of ``argv`` on the profile's host; None when the profile names
    no public model configuration to run it with."""
    name = profile.model.config
    if name not in PUBLIC_MODELS:
        return None
    host = profile.host
    machine = Machine.of(host.memory_total_mib, host.gpu_count, host.gpu_name, host.compute_capability)
    model, device = model_facts(profile, launch.tp_size * launch.pp_size), device_facts(profile)
    asked = Question.of(argv, public_model(name), machine, environment, launch, model, device)
    return execute(release, [asked])[0]


def resolution_note(
    release: str, settings: ServerSettings | None, code_not_run: str, memory_release: str
) -> str | None:
    """Who resolved the launch's settings, said at start when it is not the release's own rules:
    its code, or why its code did not run, or the release whose rules play it."""
    if settings is not None and settings.executed:
        return f"SGLang {release}'s own code resolved the launch (run from its wheel)"
    if code_not_run:
        return f"{code_not_run}; the emulator goes on by the project's rules for {memory_release}"
    if memory_release != release:
        return (
            f"the memory model does not know SGLang {release}'s rules; it plays them with {memory_release}'s"
        )
    return None
