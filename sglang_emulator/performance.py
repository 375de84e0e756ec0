"""The performance model: how long a decode step, a verify cycle or a prefill takes on the profile.

A target forward pass costs compute, a small overhead per captured CUDA graph, one all-reduce
per ``allreduces_per_forward`` (NCCL, or the custom kernel when it is not disabled on a PCIe
host) and a cost per request in the batch. A server over several nodes adds, to every
all-reduce, the hops between hosts and the bytes sent over the profile's network. Speculative
decoding replaces the decode step with ``num_steps`` draft forwards plus one verify pass that emits
the accepted tokens.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sglang_emulator.launch import LaunchConfig
from sglang_emulator.profile import Profile

__all__ = ["AcceptSampler", "PerformanceModel"]


@dataclass(frozen=True)
class PerformanceModel:
    """Step timings for one launch on one profile; all methods return milliseconds."""

    config: LaunchConfig
    profile: Profile

    @property
    def _allreduce_us(self) -> float:
        perf = self.profile.performance
        custom_over_pcie = (
            not self.config.disable_custom_all_reduce
            and self.config.tp_size > 1
            and self.profile.host.interconnect == "pcie"
        )
        return perf.custom_allreduce_pcie_us if custom_over_pcie else perf.nccl_allreduce_us

    def _allreduces(self, count: int, tokens: int = 1) -> float:
        if self.config.tp_size == 1:
            return 0.0
        return count * (self._allreduce_us + self._network_us(tokens)) / 1000

    def _network_us(self, tokens: int) -> float:
        """What one all-reduce of ``tokens`` hidden states adds when its ring crosses hosts: a
        latency per hop between nodes and the bytes a ring all-reduce sends over each host's link."""
        nodes = self.config.nnodes
        if nodes == 1:
            return 0.0
        network = self.profile.host.network
        message_bytes = tokens * self.profile.model.hidden_size * 2
        per_link_bytes = 2 * (nodes - 1) / nodes * message_bytes
        transfer_us = per_link_bytes * 8 / (network.bandwidth_gbit_s * 1000)
        return 2 * (nodes - 1) * network.latency_us + transfer_us

    def _graph_terms_ms(self, batch: int) -> float:
        perf = self.profile.performance
        if self.config.cuda_graph_disabled or batch > self.config.cuda_graph_max_bs:
            return perf.eager_forward_penalty_ms
        return perf.captured_graph_overhead_ms * len(self.config.cuda_graph_bs)

    def decode_step_ms(self, batch: int) -> float:
        """One decode forward for ``batch`` running requests (one token each)."""
        perf = self.profile.performance
        return (
            perf.decode_compute_ms
            + self._graph_terms_ms(batch)
            + self._allreduces(self.profile.model.allreduces_per_forward, batch)
            + perf.extra_request_ms * (batch - 1)
        )

    def speculative_cycle_ms(self, batch: int) -> float:
        """Draft steps plus one verify pass for ``batch`` running requests."""
        spec = self.config.speculative
        assert spec is not None, "speculative_cycle_ms needs a speculative launch"
        perf = self.profile.performance.speculative
        # The verify time is measured with NCCL; only the difference of a slower all-reduce is added.
        nccl_us = self.profile.performance.nccl_allreduce_us
        extra_ar_ms = 0.0
        if self.config.tp_size > 1:
            extra_ar_ms = (self._allreduce_us - nccl_us) / 1000
        verify_network_ms = self._network_us(batch * spec.num_draft_tokens) / 1000
        draft_network_ms = self._network_us(batch * spec.eagle_topk) / 1000
        verify = (
            perf.verify_forward_ms
            + self._graph_terms_ms(batch)
            + (extra_ar_ms + verify_network_ms) * self.profile.model.allreduces_per_forward
            + perf.extra_request_verify_ms * (batch - 1)
        )
        draft = (
            perf.draft_forward_ms
            + (extra_ar_ms + draft_network_ms) * self.profile.draft_model.allreduces_per_forward
        )
        return verify + spec.num_steps * draft

    def mean_accept_length(self) -> float:
        """Expected tokens per verify pass: each next draft token is accepted with the profile's rate."""
        spec = self.config.speculative
        if spec is None:
            return 1.0
        rate = self.profile.performance.speculative.draft_token_accept_rate
        return sum(rate**i for i in range(spec.max_accept_length))

    def single_stream_tok_s(self) -> float:
        """Decode tokens per second of one request alone: the campaign's table."""
        if self.config.speculative is None:
            return 1000 / self.decode_step_ms(1)
        return self.mean_accept_length() * 1000 / self.speculative_cycle_ms(1)

    def prefill_ms(self, new_tokens: int) -> float:
        """One prefill forward over ``new_tokens`` uncached prompt tokens."""
        perf = self.profile.performance
        return perf.prefill_base_ms + perf.prefill_ms_per_token * new_tokens


class AcceptSampler:
    """Accept lengths per verify pass for one request, seeded and kept near the profile's mean.

    Each pass draws from the acceptance model; a draw that would carry the request's running
    total more than ``max_drift`` tokens away from its expectation is replaced by the bound, so a
    short run already shows the mean the profile states (and the campaign measured).
    """

    def __init__(self, rate: float, max_length: int, seed: int, max_drift: float = 1.5) -> None:
        self._rate = rate
        self._max_length = max_length
        self._rng = random.Random(seed)
        self._mean = sum(rate**i for i in range(max_length))
        self._drift = 0.0
        self._max_drift = max_drift

    def next(self) -> int:
        """Tokens the next verify pass emits (1 .. max_length)."""
        length = 1
        while length < self._max_length and self._rng.random() < self._rate:
            length += 1
        drift = self._drift + length - self._mean
        if drift > self._max_drift:
            length = 1
        elif drift < -self._max_drift:
            length = self._max_length
        self._drift += length - self._mean
        return length
