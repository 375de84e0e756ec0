"""sglang-stacks: each SGLang server configuration is a Pulumi stack.

The rooms, each a package whose ``__init__`` names what it offers:

- ``sglang_stacks.config``: the stack spec, typed SGLang flags, the memory planner, preflight,
  stack files;
- ``sglang_stacks.hostops``: what runs on a GPU host (transport, claim, probe, server process,
  the load generator shipped there);
- ``sglang_stacks.results``: statistics, verdicts, history, compare, gate, promote, plots;
- ``sglang_stacks.components``: the Pulumi resources and components, built on the rooms above;
- ``sglang_stacks.drive``: what drives stacks through Pulumi's Automation API (``rollout``,
  a fleet's roll back, ``recover``);
- ``sglang_stacks.campaign``: sweeps of a search space of stacks over a pool of hosts.

Beside them: ``errors`` (the one exception hierarchy, and the typed record a failure crosses
Pulumi's engine in), ``shape`` (the base of every pydantic model), ``exits`` (every exit code of the
CLI), ``project`` (the project's folders) and ``cli`` (the ``sglang-stacks`` command).

Importing the package, or any room, has no side effects and imports no module: each name is
imported when it is first read. Another Pulumi program imports what it uses::

    from sglang_stacks.components import DeploymentArgs, SGLangDeployment
    from sglang_stacks.config import load_spec
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.errors import ArtifactError as ArtifactError
    from sglang_stacks.errors import BenchmarkError as BenchmarkError
    from sglang_stacks.errors import CanaryRegressionError as CanaryRegressionError
    from sglang_stacks.errors import ClaimError as ClaimError
    from sglang_stacks.errors import FlagError as FlagError
    from sglang_stacks.errors import GateError as GateError
    from sglang_stacks.errors import HostError as HostError
    from sglang_stacks.errors import PreflightError as PreflightError
    from sglang_stacks.errors import PulumiError as PulumiError
    from sglang_stacks.errors import RegressionError as RegressionError
    from sglang_stacks.errors import RouterError as RouterError
    from sglang_stacks.errors import SchedulingError as SchedulingError
    from sglang_stacks.errors import ServerError as ServerError
    from sglang_stacks.errors import ServingError as ServingError
    from sglang_stacks.errors import SpecError as SpecError
    from sglang_stacks.errors import StacksError as StacksError
    from sglang_stacks.errors import UpdateCancelledError as UpdateCancelledError
    from sglang_stacks.exits import ExitCode as ExitCode


__all__, __getattr__, __dir__ = lazy_face(__name__)
