"""Results: what the load generator's document says, benchmark statistics and verdicts, the
results history, compare, the regression gate, promote and plots. Dependencies point down: the
command and formatting modules (compare, plot) use the others, never the reverse."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_stacks._face import lazy_face

if TYPE_CHECKING:
    from sglang_stacks.results.compare import Comparison as Comparison
    from sglang_stacks.results.history import HistoryRow as HistoryRow
    from sglang_stacks.results.outputs import DeploymentOutputs as DeploymentOutputs
    from sglang_stacks.results.outputs import FleetOutputs as FleetOutputs
    from sglang_stacks.results.outputs import ReplicaOutputs as ReplicaOutputs
    from sglang_stacks.results.stats import BenchmarkResult as BenchmarkResult
    from sglang_stacks.results.stats import Difference as Difference
    from sglang_stacks.results.stats import Goodput as Goodput
    from sglang_stacks.results.stats import Noise as Noise
    from sglang_stacks.results.stats import Percentiles as Percentiles
    from sglang_stacks.results.stats import Slo as Slo
    from sglang_stacks.results.verdict import CanaryVerdict as CanaryVerdict
    from sglang_stacks.results.verdict import GateVerdict as GateVerdict
    from sglang_stacks.results.verdict import StackVerdict as StackVerdict


__all__, __getattr__, __dir__ = lazy_face(__name__)
