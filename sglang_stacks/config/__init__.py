"""Configuration: the stack spec, SGLang's typed launch flags, the memory planner, preflight, and
stack files (read, and edited keeping their comments). Pure logic, no Pulumi resources and no host
access."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.config.flags import ServerFlags as ServerFlags
    from sglang_stacks.config.memory import plan_memory as plan_memory
    from sglang_stacks.config.memory_plan import MemoryPlan as MemoryPlan
    from sglang_stacks.config.preflight import Finding as Finding
    from sglang_stacks.config.preflight import run_preflight as run_preflight
    from sglang_stacks.config.render import render_argv as render_argv
    from sglang_stacks.config.render import render_command as render_command
    from sglang_stacks.config.spec import CONFIG_NAMESPACE as CONFIG_NAMESPACE
    from sglang_stacks.config.spec import BenchmarkSpec as BenchmarkSpec
    from sglang_stacks.config.spec import DraftModelSpec as DraftModelSpec
    from sglang_stacks.config.spec import EnvironmentSpec as EnvironmentSpec
    from sglang_stacks.config.spec import FleetSpec as FleetSpec
    from sglang_stacks.config.spec import GateSpec as GateSpec
    from sglang_stacks.config.spec import HostSpec as HostSpec
    from sglang_stacks.config.spec import LaunchSpec as LaunchSpec
    from sglang_stacks.config.spec import ModelSpec as ModelSpec
    from sglang_stacks.config.spec import SloSpec as SloSpec
    from sglang_stacks.config.spec import StackSpec as StackSpec
    from sglang_stacks.config.spec import load_spec as load_spec
    from sglang_stacks.config.spec import spec_json_schema as spec_json_schema
    from sglang_stacks.config.stackfile import StackFile as StackFile
    from sglang_stacks.config.stackfile import StackText as StackText
    from sglang_stacks.config.stackfile import load_stack_spec as load_stack_spec
    from sglang_stacks.config.stackfile import read_stack_file as read_stack_file


__all__, __getattr__, __dir__ = lazy_face(__name__)
