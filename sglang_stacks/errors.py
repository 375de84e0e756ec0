"""Every error sglang-stacks raises on purpose, in one hierarchy.

StacksError                  base: a sentence saying what went wrong and how to fix it
├── SpecError                a stack file or config value is malformed (names the key)
├── FlagError                a launch flag is unknown to, or renamed in, the target release
├── PreflightError           the configuration is knowably doomed on this host
├── HostError                the GPU host cannot be reached, or differs from its declared facts
│   └── ClaimError           another stack holds, or is taking, this host's GPUs
├── ArtifactError            the draft model is missing or does not match its manifest
├── ServerError              SGLang did not become ready (classified: oom, bad_flag, nccl, other)
├── RouterError              SGLang's router did not start, or would not add or drain a worker
└── BenchmarkError           the post-deploy benchmark failed or regressed
"""

from __future__ import annotations


class StacksError(Exception):
    """Base of every deliberate error; its message is whole sentences ending with the fix."""


class SpecError(StacksError):
    """A stack file or config value is malformed."""


class FlagError(StacksError):
    """A launch flag is unknown to, or has no rendering for, the target SGLang release."""


class PreflightError(StacksError):
    """Preflight found errors that would make the launch fail."""


class HostError(StacksError):
    """The GPU host is unreachable or does not match its declared facts."""


class ClaimError(HostError):
    """The host's GPUs are claimed by another stack, or two updates raced for them."""


class ArtifactError(StacksError):
    """A draft-model artifact is missing or corrupt."""


class ServerError(StacksError):
    """The SGLang server failed to start or to become ready."""


class RouterError(StacksError):
    """SGLang's router (sglang-router) failed to start, or to add, list or drain a worker."""


class BenchmarkError(StacksError):
    """The benchmark could not run, or its result regressed past the gate."""
