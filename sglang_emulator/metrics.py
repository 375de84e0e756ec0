"""``/metrics`` in Prometheus text format, with SGLang's metric names.

Served only with ``--enable-metrics``, as SGLang does. Histograms use cumulative buckets.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Histogram", "render_metrics"]

_LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)


@dataclass
class Histogram:
    """A Prometheus histogram over seconds."""

    buckets: tuple[float, ...] = _LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=lambda: [0] * (len(_LATENCY_BUCKETS_S) + 1))
    total: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe(self, value_s: float) -> None:
        with self._lock:
            index = next((i for i, b in enumerate(self.buckets) if value_s <= b), len(self.buckets))
            self.counts[index] += 1
            self.total += value_s

    def lines(self, name: str, labels: str) -> list[str]:
        with self._lock:
            out = []
            running = 0
            for bound, count in zip([*self.buckets, float("inf")], self.counts, strict=True):
                running += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
            out.append(f"{name}_sum{{{labels}}} {self.total}")
            out.append(f"{name}_count{{{labels}}} {running}")
            return out


def render_metrics(
    model_name: str,
    gauges: Mapping[str, tuple[str, float]],
    counters: Mapping[str, tuple[str, float]],
    histograms: Mapping[str, tuple[str, Histogram]],
) -> str:
    """The exposition text: ``name -> (help, value)`` for gauges and counters."""
    labels = f'model_name="{model_name}",engine_type="unified",tp_rank="0",pp_rank="0"'
    lines: list[str] = []
    for name, (doc, value) in gauges.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
    for name, (doc, value) in counters.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name}{{{labels}}} {float(value)}"]
    for name, (doc, hist) in histograms.items():
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *hist.lines(name, labels)]
    return "\n".join(lines) + "\n"
