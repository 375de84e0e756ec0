"""``. scripts/env.sh``, as a newcomer's shell sources it: the shipped stacks are created in the
backend, and the stack a bare ``pulumi up`` targets is baseline, the one that deploys, or the one
the user selected."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests._pulumi import PASSPHRASE, ROOT, Workspace, emulator_stack, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One backend for the file's shells: the first to source env.sh creates the shipped stacks in
    it (17 `pulumi stack init`s, each deriving the passphrase's key), the later ones find them."""
    return tmp_path_factory.mktemp("env-state")


def _in_shell(tmp_path: Path, commands: str, backend: Path | None = None) -> str:
    """``commands`` run in bash after ``. scripts/env.sh``, with a Pulumi home (where the selected
    stack is kept) of the test's own and ``backend`` (by default one of its own too)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_RUN_PROGRAM"))
    }
    state = backend or tmp_path / "state"
    env.update(PULUMI_BACKEND_URL=f"file://{state}", PULUMI_HOME=str(tmp_path / "home"))
    done = subprocess.run(
        ["bash", "-c", f". scripts/env.sh && {commands}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_sourcing_env_creates_the_shipped_stacks_and_selects_baseline(tmp_path: Path, backend: Path) -> None:
    listed = _in_shell(
        tmp_path,
        "pulumi stack ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'",
        backend,
    )
    shipped = len(list((ROOT / "stacks").glob("Pulumi.*.yaml")))

    assert int(listed) == shipped
    assert _in_shell(tmp_path, "pulumi stack --show-name", backend) == "baseline"


def test_a_stack_the_user_selected_stays_selected(tmp_path: Path, backend: Path) -> None:
    _in_shell(tmp_path, "pulumi stack select eagle3-bs128", backend)

    assert _in_shell(tmp_path, "pulumi stack --show-name", backend) == "eagle3-bs128"


def test_a_passphrase_file_exported_after_sourcing_env_is_the_one_used(tmp_path: Path, backend: Path) -> None:
    """The demo passphrase never wins over the user's own: a stack created after the user exports
    PULUMI_CONFIG_PASSPHRASE_FILE keeps its secret under the user's passphrase."""
    mine = tmp_path / "passphrase"
    mine.write_text("only-mine")
    project = tmp_path / "project"
    shown = _in_shell(
        tmp_path,
        f"export PULUMI_CONFIG_PASSPHRASE_FILE={mine} && mkdir {project} && cd {project} && "
        "printf 'name: p\\nruntime: python\\n' > Pulumi.yaml && "
        "pulumi stack init mine --non-interactive >/dev/null && "
        "pulumi config set --secret key s3cret --non-interactive && "
        "PULUMI_CONFIG_PASSPHRASE=only-mine pulumi config get key --non-interactive",
        backend,
    )
    assert shown.splitlines()[-1] == "s3cret"


def test_the_program_runs_before_the_refresh_unless_the_user_said_otherwise(
    tmp_path: Path, backend: Path
) -> None:
    """A stack file's mistake is refused before any host is read (tests/test_stack_typo.py)."""
    assert _in_shell(tmp_path, "echo $PULUMI_RUN_PROGRAM", backend) == "true"
    again = "export PULUMI_RUN_PROGRAM=false && . scripts/env.sh && echo $PULUMI_RUN_PROGRAM"
    assert _in_shell(tmp_path, again, backend) == "false"


def test_a_failed_pulumi_command_is_followed_by_what_its_message_leaves_out(tmp_path: Path) -> None:
    """In the shell env.sh sets up, Pulumi's "invalid YAML file: yaml: line 17" gains the file, the
    line with a caret and the fix, and its lock refusal after a killed update gains the one command
    that clears it; the exit code stays Pulumi's and a command that succeeds gains nothing."""
    workspace = Workspace.create(tmp_path)  # its backend is the shell's (tmp_path/state)
    workspace.init_stack("broken", emulator_stack(port=free_port(), state_dir=tmp_path))
    workspace.init_stack("locked", emulator_stack(port=free_port(), state_dir=tmp_path))
    broken_file = workspace.path / "stacks" / "Pulumi.broken.yaml"
    broken_file.write_text(broken_file.read_text().replace("    tp_size: 8\n", "    tp_size: 8\n   port:9\n"))
    workspace.leave_lock("locked", pid=2**22 + 1)  # a pid no process has: the update was killed
    commands = [
        "pulumi preview -s broken",
        "command pulumi preview -s broken",  # Pulumi alone
        "pulumi up --yes --stack=locked",
        "command pulumi up --yes --stack=locked",
        "pulumi stack ls --json >/dev/null",
    ]
    run = " ; echo '==='; ".join("{ " + command + " 2>&1; echo exit $?; }" for command in commands)
    said = _in_shell(
        tmp_path, f"export PULUMI_CONFIG_PASSPHRASE={PASSPHRASE} && cd {workspace.path} && {run}"
    )
    broken, broken_alone, locked, locked_alone, fine = (part.strip() for part in said.split("==="))

    assert "invalid YAML file: yaml: line 17" in broken, broken  # Pulumi's own line, then the project's
    assert "sglang-stacks: stacks/Pulumi.broken.yaml, line 16, column 4, is not valid YAML" in broken, broken
    assert "\n       port:9\n       ^\n" in broken and "`sglang-stacks check <stack>`" in broken, broken
    assert "the stack is currently locked" in locked, locked
    assert "left by a killed update" in locked and "`sglang-stacks recover locked`" in locked, locked
    for with_it, alone in ((broken, broken_alone), (locked, locked_alone)):
        assert "sglang-stacks:" not in alone and "recover" not in alone, alone
        assert with_it.splitlines()[-1] == alone.splitlines()[-1] != "exit 0"
    assert fine == "exit 0"
