"""What every Pulumi resource of the project builds on, on a host or on a cluster: the typed
dynamic provider (``provider``: inputs and outputs as pydantic models, diffs by field, what a
provider call starts with) and the typed resource over it (``resource``), how the project's errors
reach the user through the engine (``provider_errors``), the engine's status of the update
(``engine_status``), the spec turned into what resources take (``wiring``: the connection, the
canonical launch flags, digests), the benchmark's inputs and outputs both paths measure with
(``benchmark_shape``), and a stack's state as the backend keeps it, read into models (``state``).

``components`` (one host, a fleet) and ``kube`` (a cluster) both build on it; it imports neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.resources.provider import Props as Props
    from sglang_stacks.resources.provider import TypedProvider as TypedProvider
    from sglang_stacks.resources.resource import Args as Args
    from sglang_stacks.resources.resource import TypedResource as TypedResource
    from sglang_stacks.resources.resource import args_for as args_for
    from sglang_stacks.resources.wiring import connection_args as connection_args


__all__, __getattr__, __dir__ = lazy_face(__name__)
