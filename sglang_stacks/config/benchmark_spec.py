"""The stack spec's benchmark and gate sections: the workload measured after every new server,
its service-level objectives, and the regression gate against a baseline stack."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sglang_stacks.config.docstrings import FileSection


class SloSpec(FileSection):
    """Per-request limits (service-level objectives): requests within all of them count as goodput."""

    ttft_ms: float | None = Field(default=None, gt=0)
    """Longest time to first token, in milliseconds."""
    tpot_ms: float | None = Field(default=None, gt=0)
    """Longest mean time per output token after the first, in milliseconds."""
    e2e_ms: float | None = Field(default=None, gt=0)
    """Longest end-to-end latency of a request, in milliseconds."""

    @model_validator(mode="after")
    def _some_limit(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError(
                "an slo needs at least one of ttft_ms, tpot_ms and e2e_ms; set one or remove slo"
            )
        return self


class BenchmarkSpec(FileSection):
    """The post-deploy benchmark: prompts of exactly ``input_len`` server tokens, fresh in every run,
    a closed loop of streams or an open loop at request rates, warmup, repeated measurements."""

    endpoint: Literal["generate", "completions", "chat"] = "generate"
    """Route: SGLang's ``/generate``, or OpenAI's ``/v1/completions`` or ``/v1/chat/completions``."""
    input_len: int = Field(default=1024, ge=1)
    """Prompt tokens per request, as the server counts them (checked against every response)."""
    output_len: int = Field(default=512, ge=1)
    """Generated tokens per request."""
    ignore_eos: bool = True
    """Keep generating past end-of-sequence so every request yields ``output_len`` tokens."""
    dataset: Literal["fixed", "random", "sharegpt"] = "fixed"
    """``fixed`` lengths, ``random`` lengths in [range_ratio * len, len], or a ``sharegpt`` file."""
    range_ratio: float = Field(default=0.5, gt=0, le=1)
    """random: the shortest length drawn, as a fraction of input_len and output_len."""
    dataset_path: str = Field(default="", pattern=r"^[^\x00-\x1f\x7f]*$")
    """sharegpt: a ShareGPT-format JSON file on this machine; it is shipped with the benchmark."""
    seed: int = Field(default=0, ge=0)
    """Seed of the random lengths and of the ShareGPT sample: the same in every run."""
    prefix_share: float = Field(default=0.0, ge=0, lt=1)
    """Fraction of each prompt shared by all requests of a run, to measure the prefix cache on
    purpose; 0 makes every prompt of every run distinct."""
    arrival: Literal["closed", "poisson", "gamma"] = "closed"
    """``closed``: ``concurrency`` streams; ``poisson``/``gamma``: requests arrive at ``request_rate``."""
    request_rate: tuple[float, ...] = ()
    """Open loop: requests per second, one load level each (a rate sweep when several)."""
    burstiness: float = Field(default=1.0, gt=0)
    """gamma arrivals: shape of the gaps; 1 is Poisson, below 1 burstier, above 1 more regular."""
    concurrency: tuple[int, ...] = Field(default=(1,), min_length=1)
    """Closed loop: concurrent streams to measure, one level each."""
    duration_s: float = Field(default=0.0, ge=0)
    """If above 0, each repetition sends requests for this long instead of requests_per_repetition."""
    warmup_requests: int = Field(default=2, ge=0)
    """Requests sent and discarded before measuring, at each level."""
    repetitions: int = Field(default=5, ge=1)
    """Measured repetitions per level; the mean and 95 % interval come from these."""
    requests_per_repetition: int = Field(default=4, ge=1)
    """Requests per repetition; at least the highest concurrency."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """Longest one request may take before it counts as an error."""
    timeout_s: float = Field(default=3600.0, gt=0)
    """Longest the whole benchmark may take on the host."""
    slo: SloSpec | None = None
    """Limits per request; with them the stack reports goodput (output ``goodput``)."""

    @model_validator(mode="after")
    def _enough_requests(self) -> BenchmarkSpec:
        if any(c < 1 for c in self.concurrency):
            raise ValueError("concurrency levels must be at least 1")
        if len(set(self.concurrency)) != len(self.concurrency):
            raise ValueError(f"concurrency {list(self.concurrency)} repeats a level; list each once")
        if self.arrival == "closed":
            if self.request_rate:
                raise ValueError("request_rate applies to open loop only; set arrival: poisson or gamma")
            if not self.duration_s and self.requests_per_repetition < max(self.concurrency):
                raise ValueError(
                    f"requests_per_repetition={self.requests_per_repetition} cannot keep "
                    f"{max(self.concurrency)} streams busy; set it to at least {max(self.concurrency)}"
                )
        elif not self.request_rate or min(self.request_rate) <= 0:
            raise ValueError(
                f"arrival: {self.arrival} needs request_rate, a list of rates above 0 requests per second; "
                "set it (e.g. [2, 4, 8]) or set arrival: closed"
            )
        if (self.dataset == "sharegpt") != bool(self.dataset_path):
            raise ValueError(
                "dataset: sharegpt needs dataset_path (a ShareGPT JSON file), and dataset_path needs "
                "dataset: sharegpt; set both or neither"
            )
        return self


class GateSpec(FileSection):
    """A regression gate: compare this stack's tok/s with a baseline stack's."""

    baseline_stack: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    """Name of the stack whose recorded tok/s is the reference."""
    tolerance_pct: float = Field(default=5.0, ge=0, le=100)
    """How many percent slower than the baseline still passes."""
    on_regression: Literal["fail", "hand_back"] = "fail"
    """``fail`` the update, or ``hand_back`` the host to the baseline stack."""
