"""An SGLang stand-in for hosts without GPUs: SGLang's launch flags, HTTP API and logs.

It parses the real flag table of the emulated release, walks SGLang's startup with its log
lines, serves SGLang's HTTP endpoints and emits tokens on the schedule a hardware profile
predicts. It never pretends to be SGLang: every log and ``/server_info`` says "emulator".
Stdlib only, so it can be copied into a bare virtualenv next to ``sglang_flags`` and
``sglang_world``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sglang_emulator.profile import Profile, ProfileError
from sglang_emulator.profile_loading import load_profile, shipped_profiles

if TYPE_CHECKING:
    from sglang_emulator.launcher import RunningEmulator, start_emulator

__all__ = [
    "EMULATOR_NAME",
    "Profile",
    "ProfileError",
    "RunningEmulator",
    "load_profile",
    "shipped_profiles",
    "start_emulator",
]

EMULATOR_NAME = "sglang-emulator"


def __getattr__(name: str) -> Any:
    # The launcher (HTTP client, subprocess) is imported on first use: the emulator's nvidia-smi,
    # run three times by every probe of the host, needs only the profile and the GPU state.
    if name in ("RunningEmulator", "start_emulator"):
        from sglang_emulator import launcher

        return getattr(launcher, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
