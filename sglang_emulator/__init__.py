"""An SGLang stand-in for hosts without GPUs: SGLang's launch flags, HTTP API and logs.

It parses the real flag table of the emulated release, walks SGLang's startup with its log
lines, serves SGLang's HTTP endpoints and emits tokens on the schedule a hardware profile
predicts. It never pretends to be SGLang: every log and ``/server_info`` says "emulator".
Stdlib only, so it can be copied into a bare virtualenv next to ``sglang_flags``.
"""

from __future__ import annotations

from sglang_emulator.launcher import RunningEmulator, start_emulator
from sglang_emulator.profile import Profile, ProfileError, load_profile, shipped_profiles

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
