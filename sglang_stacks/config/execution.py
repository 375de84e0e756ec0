"""A stack's launch command judged by its release's own code (``sglang_world.execute``).

A stack that names its model's ``config.json`` (``model.config``) is resolved by the release's own
``ServerArgs`` on a stand-in machine of its host's GPUs: the memory plan then takes the release's
settings, and what the release raises while resolving is preflight's refusal in SGLang's words. A
campaign asks for all its candidates at once (``execute_all``), one child interpreter per release.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from sglang_flags import load_table
from sglang_stacks.config.findings import Finding, error, warning
from sglang_stacks.config.memory_facts import emulator_profile, stack_device, stack_model
from sglang_stacks.config.render import render_argv
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError
from sglang_world.execute import Answer, Machine, Question, execute
from sglang_world.launch import launch_from_argv

__all__ = ["execute_all", "executed", "question", "release_code"]


def question(spec: StackSpec, release: str) -> Question | None:
    """What the release's code is asked for ``spec``; None when the stack names no model
    configuration or its flags cannot be rendered for the release (preflight says why)."""
    config = spec.model.hf_config()
    if config is None:
        return None
    try:
        argv = render_argv(spec.launch_flags(), release)
    except (FlagError, SystemExit):
        return None
    host = spec.host
    machine = Machine.of(host.memory_per_gpu_mib, host.gpu_count, host.gpu_model, host.compute_capability)
    launch = launch_from_argv(release, argv, spec.environment.env)
    return Question.of(
        argv,
        config,
        machine,
        spec.environment.env,
        launch,
        stack_model(spec, launch.pp_size),
        stack_device(spec),
    )


def executed(spec: StackSpec, release: str) -> Answer | None:
    """The release's own resolution of ``spec``'s launch; None when there is nothing to ask."""
    asked = question(spec, release)
    return None if asked is None else execute(release, [asked])[0]


def execute_all(judged: Iterable[tuple[StackSpec, str]]) -> None:
    """Resolve every (stack, release) pair's launch, one child interpreter per release, so that each
    ``executed`` after this reads its kept answer."""
    by_release: dict[str, list[Question]] = defaultdict(list)
    for spec, release in judged:
        asked = question(spec, release)
        if asked is not None:
            by_release[release].append(asked)
    for release, questions in by_release.items():
        execute(release, questions)


def release_code(spec: StackSpec, release: str) -> Iterable[Finding]:
    """Preflight's findings of the release's own code: its refusal, in its words, or that it could not
    run; and on the emulator host, a model configuration the emulated server does not play."""
    profile, config = emulator_profile(spec), spec.model.config
    played = profile.model.config if profile is not None else ""
    if config is not None and played and config != played:
        yield warning(
            "model-config-not-emulated",
            "model.config",
            f"model.config names {config}, but the emulator profile {spec.environment.emulator.profile} "
            f"plays {played}: preflight judges the launch with {config}'s config.json, the emulated "
            f"server with {played}'s, so the two can disagree.",
            f"Name the profile's model (model.config: {played}), or use an emulator profile of {config}.",
        )
    answer = executed(spec, release)
    if answer is None:
        return
    if answer.unserved:
        yield warning(
            "release-lacks-model",
            "model.config",
            f"{answer.not_run}. The plan's settings are the project's rules for SGLang {release}.",
            "Pin a release that serves the model (environment.sglang_release), or check the model's config.",
        )
    elif answer.not_run is not None:
        yield warning(
            "release-code-not-run",
            "environment.sglang_release",
            f"{answer.not_run}. The plan's settings are the project's rules for SGLang {release}, an "
            "approximation of its code.",
            f"Make the wheel reachable (pip download sglang=={release} --no-deps), then preview again.",
        )
    elif answer.refusal is not None:
        named = [f"server.{flag.replace('-', '_')}" for flag in _flags_named(release, answer.refusal)]
        said = ", ".join(dict.fromkeys(named))
        yield error(
            "release-refuses",
            named[0] if named else "server",
            f"SGLang {release} refuses this launch while resolving its arguments: {answer.refusal}",
            f"Change {said or 'the server flags'} as SGLang says, or pin a release that accepts the "
            "launch (environment.sglang_release). Nothing was launched.",
        )


def _flags_named(release: str, refusal: str) -> list[str]:
    """The launch flags a refusal names (``--tp-size``), or, for an ``assert`` the release gives no
    message (``assert resolved_view(server_args).ep_size > 1``), the arguments it reads that are
    flags of the release (``ep-size``)."""
    flags = re.findall(r"--([a-z0-9-]+)", refusal)
    if flags:
        return flags
    options = {option for flag in load_table(release).flags for option in flag.flags}
    read = (name.replace("_", "-") for name in re.findall(r"\.([a-z][a-z0-9_]*)", refusal))
    return [name for name in read if f"--{name}" in options]
