"""``python -m sglang_emulator <SGLang launch flags>``: start an emulated SGLang server.

``python -m sglang_emulator --version`` (that one argument alone) prints the emulated SGLang
version, as ``import sglang; print(sglang.__version__)`` would. No SGLang release has a
``--version`` launch flag, so the shortcut shadows nothing: with any other argument, or with
``--version`` among launch flags, the release's parser decides, and rejects it as SGLang does.

This module reads the settings (profile, release, environment, faults) that both answers check;
the server itself is ``serve``, imported only to serve: an environment check asks ``--version``
on every refresh, and the server's modules are most of a start's CPU.
"""

from __future__ import annotations

import os
import sys

from sglang_emulator.faults import FaultError, load_faults
from sglang_emulator.profile import Profile, ProfileError
from sglang_emulator.profile_loading import load_profile
from sglang_flags import known_releases, nearest_releases
from sglang_world.scheduling import scheduling_rules


def _fatal(message: str, code: int = 2) -> int:
    print(f"sglang-emulator: error: {message}", file=sys.stderr, flush=True)
    return code


def _release(profile: Profile) -> str:
    release = os.environ.get("SGLANG_EMULATOR_RELEASE") or profile.sglang_release
    if release not in known_releases():
        raise ValueError(
            f"SGLANG_EMULATOR_RELEASE (or the profile's sglang_release) is {release!r}, which has no flag "
            f"table; the nearest emulated releases are {' and '.join(nearest_releases(release))}. "
            "Set it to one of them."
        )
    return release


def _env_number(name: str, default: str, kind: type[int] | type[float], meaning: str) -> float:
    """The variable ``name`` (``default`` unless set) as a number >= 0 of ``kind``; ValueError
    naming it, what it means and the fix otherwise."""
    raw = os.environ.get(name, default)
    try:
        value = float(kind(raw))
    except ValueError:
        value = -1.0
    if value < 0:
        raise ValueError(f"{name} is {raw!r}; it must be {meaning}. Fix the variable.")
    return value


def _time_scale() -> float:
    return _env_number(
        "SGLANG_EMULATOR_TIME_SCALE",
        "1.0",
        float,
        "a number >= 0 (1.0 = realistic startup, 0.01 = a hundred times faster)",
    )


def _health_check_timeout_s() -> float:
    # SGLang reads it as an int of seconds, 20 unless set.
    return _env_number(
        "SGLANG_HEALTH_CHECK_TIMEOUT",
        "20",
        int,
        "a whole number of seconds >= 0 (SGLang's default is 20)",
    )


def main(argv: list[str]) -> int:
    try:
        profile = load_profile()
        release = _release(profile)
        scale = _time_scale()
        health_check_timeout_s = _health_check_timeout_s()
        faults = load_faults(profile.faults)
        rules = scheduling_rules(release)
    except (ProfileError, FaultError, ValueError) as exc:
        return _fatal(str(exc))
    if argv == ["--version"]:
        print(release)
        return 0
    from sglang_emulator.serve import serve

    return serve(
        argv,
        profile=profile,
        release=release,
        scale=scale,
        health_check_timeout_s=health_check_timeout_s,
        faults=faults,
        rules=rules,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
