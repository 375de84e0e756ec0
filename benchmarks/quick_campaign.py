"""Wall time of the first campaign a newcomer runs: ``sglang-stacks sweep run quick``.

Makes a throwaway project (the repository's program, campaign file and baseline stack, a local
backend of its own) and runs ``campaigns/quick.yaml`` exactly as shipped: its pool of two emulator
hosts (their state folders under ``~/.sglang-stacks/pool/quick-*``, ports 30105 and 30106), its
four kept trials, each a real ``pulumi up`` and ``pulumi destroy``. Prints the wall time of the run
and of the report, the machine's load average before and after, and checks that the run left no
trial stack behind. Run: ``python benchmarks/quick_campaign.py`` (with ``. scripts/env.sh`` done).
The README gives the time measured with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKED = (
    *("Pulumi.yaml", "__main__.py", "components", "sglang_stacks", "sglang_flags", "sglang_emulator"),
    *("toolchain", "artifacts", ".venv"),
)
"""What the throwaway project links from the repository."""


def _project(folder: Path) -> dict[str, str]:
    """The throwaway project in ``folder`` and the environment of its commands."""
    project, backend = folder / "project", folder / "state"
    (project / "stacks").mkdir(parents=True)
    (project / "campaigns").mkdir()
    backend.mkdir()
    for name in LINKED:
        (project / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "stacks" / "Pulumi.baseline.yaml", project / "stacks")
    for name in ("quick.yaml", "schema.json"):
        shutil.copy(ROOT / "campaigns" / name, project / "campaigns")
    env = dict(os.environ)
    env.update(
        PULUMI_BACKEND_URL=f"file://{backend}",
        PULUMI_CONFIG_PASSPHRASE="sglang-stacks-demo",  # the shipped stack files' demo passphrase
        SGLANG_STACKS_HOME=str(ROOT),
        SGLANG_STACKS_HISTORY=str(folder / "history.sqlite"),
    )
    return env


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True)
    return time.monotonic() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="quick-campaign-") as scratch:
        folder = Path(scratch)
        env = _project(folder)
        project = folder / "project"
        subprocess.run(
            ["pulumi", "stack", "init", "baseline", "--non-interactive"], cwd=project, env=env, check=True
        )
        cli = [sys.executable, "-m", "sglang_stacks.cli", "sweep"]
        load_before = os.getloadavg()
        run_s = _timed([*cli, "run", "quick"], project, env)
        report_s = _timed([*cli, "report", "quick"], project, env)
        load_after = os.getloadavg()
        listed = subprocess.run(
            ["pulumi", "stack", "ls"], cwd=project, env=env, check=True, capture_output=True, text=True
        ).stdout
        left = sorted(path.name for path in (project / "stacks").glob("Pulumi.quick-*.yaml"))
    print(f"sweep run quick: {run_s:.0f} s ({run_s / 60:.1f} min); sweep report quick: {report_s:.0f} s")
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {load_after}")
    print(f"trial stacks left: {left or 'none'} in stacks/; backend:\n{listed}")


if __name__ == "__main__":
    main()
