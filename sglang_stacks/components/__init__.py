"""The Pulumi resources: one module per resource (host probe and claim, Python environment, draft
model, server, benchmark; a fleet's router, its workers and canary gate) and the components that
compose them, ``SGLangDeployment`` (one host) and ``Fleet`` (replicas behind SGLang's router).

Another Pulumi program builds them from its own code::

    from sglang_stacks.components import DeploymentArgs, SGLangDeployment
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.components.benchmark import Benchmark as Benchmark
    from sglang_stacks.components.benchmark import BenchmarkArgs as BenchmarkArgs
    from sglang_stacks.components.canary import CanaryArgs as CanaryArgs
    from sglang_stacks.components.canary import CanaryGate as CanaryGate
    from sglang_stacks.components.deployment import DeploymentArgs as DeploymentArgs
    from sglang_stacks.components.deployment import SGLangDeployment as SGLangDeployment
    from sglang_stacks.components.draft_model import DraftModel as DraftModel
    from sglang_stacks.components.draft_model import DraftModelArgs as DraftModelArgs
    from sglang_stacks.components.draft_model import draft_model_args as draft_model_args
    from sglang_stacks.components.environment import EnvironmentArgs as EnvironmentArgs
    from sglang_stacks.components.environment import PythonEnvironment as PythonEnvironment
    from sglang_stacks.components.environment import environment_args as environment_args
    from sglang_stacks.components.fleet import Fleet as Fleet
    from sglang_stacks.components.fleet import FleetArgs as FleetArgs
    from sglang_stacks.components.host import ClaimArgs as ClaimArgs
    from sglang_stacks.components.host import GpuClaim as GpuClaim
    from sglang_stacks.components.host import HostProbe as HostProbe
    from sglang_stacks.components.host import ProbeArgs as ProbeArgs
    from sglang_stacks.components.multinode import InitAddressArgs as InitAddressArgs
    from sglang_stacks.components.multinode import InitAddressCheck as InitAddressCheck
    from sglang_stacks.components.router import RouterArgs as RouterArgs
    from sglang_stacks.components.router import RouterWorker as RouterWorker
    from sglang_stacks.components.router import SGLangRouter as SGLangRouter
    from sglang_stacks.components.router import WorkerArgs as WorkerArgs
    from sglang_stacks.components.server import ServerArgs as ServerArgs
    from sglang_stacks.components.server import SGLangServer as SGLangServer


__all__, __getattr__, __dir__ = lazy_face(__name__)
