"""An ``nvidia-smi`` for the emulated host: its command line, answered with the profile's GPUs in
the real tool's formats.

Run as ``python -m sglang_emulator.nvidia_smi <args>``. Memory used reflects the emulated
servers running now (their records in the state dir). Supported: the plain summary, ``-L``,
``--query-gpu=<fields>`` and ``--query-compute-apps=<fields>`` with ``--format=csv[,noheader]
[,nounits]``, ``-i <indices>`` and ``topo -m``.
"""

from __future__ import annotations

import sys

from sglang_emulator.nvidia_smi_formats import (
    UsageError,
    gpu_uuid,
    render_query_apps,
    render_query_gpu,
    render_summary,
    render_topology,
)
from sglang_emulator.profile import Profile, ProfileError
from sglang_emulator.profile_loading import load_profile
from sglang_emulator.state import StateDir, state_dir

__all__ = ["main"]


def _parse_indices(value: str, count: int) -> list[int]:
    try:
        indices = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise UsageError(
            f"Invalid GPU index {value!r}: use comma-separated indices 0..{count - 1}."
        ) from None
    for index in indices:
        if not 0 <= index < count:
            raise UsageError("No devices were found" if count == 0 else f"GPU index {index} is not valid.")
    return indices


def run(argv: list[str], profile: Profile, state: StateDir) -> str:
    """The output of ``nvidia-smi <argv>``; ``UsageError`` for what the shim does not support."""
    processes = state.live_processes()
    options: dict[str, str] = {}
    flags: set[str] = set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            options[key] = value
        elif arg in ("-i", "--id", "--query-gpu", "--query-compute-apps", "--format") and args:
            options[{"-i": "--id"}.get(arg, arg)] = args.pop(0)
        else:
            flags.add(arg)
    indices = _parse_indices(options["--id"], profile.host.gpu_count) if "--id" in options else None
    if "topo" in flags:
        if "-m" not in flags and "--matrix" not in flags:
            raise UsageError("The emulated nvidia-smi supports only `topo -m`.")
        return render_topology(profile)
    if "-L" in flags or "--list-gpus" in flags:
        return "".join(
            f"GPU {i}: {profile.host.gpu_name} (UUID: {gpu_uuid(profile, i)})\n"
            for i in range(profile.host.gpu_count)
            if indices is None or i in indices
        )
    query = options.get("--query-gpu") or options.get("--query-compute-apps")
    if query is not None:
        fmt = options.get("--format", "")
        parts = {p.strip() for p in fmt.split(",")}
        if "csv" not in parts:
            raise UsageError('"--format" must be given as csv with --query-*, e.g. --format=csv,noheader.')
        fields = [f.strip() for f in query.split(",") if f.strip()]
        if "--query-gpu" in options:
            return render_query_gpu(
                profile, processes, fields, "noheader" in parts, "nounits" in parts, indices
            )
        return render_query_apps(profile, processes, fields, "noheader" in parts, "nounits" in parts)
    unknown = sorted(flags)
    if unknown:
        raise UsageError(f"Invalid combination of input arguments: {' '.join(unknown)} is not emulated.")
    return render_summary(profile, processes, indices)


def main(argv: list[str] | None = None) -> int:
    """Print what ``nvidia-smi`` would; exit 2 on arguments it does not know, as the real tool does."""
    try:
        profile = load_profile()
    except ProfileError as exc:
        print(f"sglang-emulator nvidia-smi: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(run(sys.argv[1:] if argv is None else argv, profile, state_dir()))
    except UsageError as exc:
        print(exc)
        print("Please run 'nvidia-smi -h' for help.")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
