"""The project's language host (toolchain/pulumi-cli/languagehost), which the engine of the CLI the
bootstrap builds starts twice per pass: it runs the program as Pulumi's own host does, and it ends,
with its program, once the engine that started it is gone."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import language_pb2, language_pb2_grpc

from tests._processes import alive

# A stand-in interpreter: it notes how it was started, then behaves as its EXIT file says.
FAKE_PYTHON = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/../argv"
printf '%s' "$PULUMI_CONFIG" > "$(dirname "$0")/../config"
printf '%s' "$PULUMI_CONFIG_SECRET_KEYS" > "$(dirname "$0")/../secret_keys"
pwd > "$(dirname "$0")/../cwd"
echo $$ > "$(dirname "$0")/../pid"
code=$(cat "$(dirname "$0")/../EXIT")
if [ "$code" = wait ]; then exec sleep 600; fi
exit "$code"
"""


def _project_host() -> Path:
    """The host beside the CLI, when it is the one this checkout's sources build."""
    found = shutil.which("pulumi-language-python")
    if found is None:
        pytest.fail("pulumi-language-python is not on PATH; run scripts/bootstrap.sh")
    host = Path(found)
    stamp = host.with_name("pulumi-language-python.stamp")
    binary = hashlib.sha256(host.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text().split()[1:] != [binary]:
        pytest.skip("the Pulumi CLI in use brings its own language host")
    return host


class Host:
    def __init__(self, binary: Path, engine: socket.socket, venv: Path) -> None:
        self.engine = engine
        self.venv = venv
        self.process = subprocess.Popen(
            [str(binary), f"127.0.0.1:{engine.getsockname()[1]}"], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = language_pb2_grpc.LanguageRuntimeStub(self.channel)

    def request(self, exit_code: str, **fields: Any) -> Any:
        """A run of the project in the fake venv's folder, whose program exits with ``exit_code``
        (or, with ``wait``, runs until stopped)."""
        (self.venv / "EXIT").write_text(exit_code)
        options = struct_pb2.Struct()
        options.update({"virtualenv": "venv"})
        info = language_pb2.ProgramInfo(
            root_directory=str(self.venv.parent), program_directory=str(self.venv.parent), options=options
        )
        return language_pb2.RunRequest(info=info, pwd=str(self.venv.parent), **fields)

    def run(self, exit_code: str, **fields: Any) -> Any:
        return self.stub.Run(self.request(exit_code, **fields))

    def note(self, name: str) -> str:
        return (self.venv / name).read_text()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    binary = _project_host()
    bin_dir = tmp_path / "venv" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON)
    (bin_dir / "python").chmod(0o755)
    engine = socket.create_server(("127.0.0.1", 0))
    started = Host(binary, engine, bin_dir.parent)
    yield started
    started.channel.close()
    engine.close()
    if started.process.poll() is None:
        started.process.send_signal(signal.SIGINT)
    started.process.wait(timeout=10)


def test_the_program_runs_with_the_stack_config_and_pulumis_flags(host: Host) -> None:
    answer = host.run(
        "0",
        project="sglang-stacks",
        stack="eagle3-bs128",
        config={"sglang-stacks:server": '{"tp_size": 8}'},
        configSecretKeys=["sglang-stacks:hub_token"],
        monitor_address="127.0.0.1:1234",
        dryRun=True,
        parallel=16,
    )
    assert answer.error == "" and not answer.bail
    argv = host.note("argv").splitlines()
    assert argv[0] == "-u" and argv[1].endswith("pulumi-language-python-exec")
    assert "--stack=eagle3-bs128" in argv and "--monitor=127.0.0.1:1234" in argv
    assert "--dry_run=true" in argv and "--parallel=16" in argv
    assert argv[-1] == str(host.venv.parent)
    assert json.loads(host.note("config")) == {"sglang-stacks:server": '{"tp_size": 8}'}
    assert json.loads(host.note("secret_keys")) == ["sglang-stacks:hub_token"]
    assert host.note("cwd").strip() == str(host.venv.parent)


def test_a_failed_program_is_an_error_unless_it_has_shown_its_own(host: Host) -> None:
    failed = host.run("3", stack="s")
    assert failed.error == "Program exited with non-zero exit code: 3" and not failed.bail
    shown = host.run("32", stack="s")
    assert shown.bail and shown.error == ""
    empty = host.run("0", stack="s")
    assert json.loads(host.note("config")) == {} and json.loads(host.note("secret_keys")) == []
    assert empty.error == ""


def test_a_missing_virtualenv_is_named_with_the_fix(host: Host) -> None:
    shutil.rmtree(host.venv / "bin")
    answer = host.run("0", stack="s")
    assert str(host.venv) in answer.error and "bootstrap" in answer.error


def test_the_host_and_its_program_end_once_the_engine_is_gone(host: Host) -> None:
    """What a CLI killed with SIGKILL leaves: its plugins are not told to stop."""
    running = host.stub.Run.future(host.request("wait"))
    deadline = time.monotonic() + 10
    while not (host.venv / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    program = int(host.note("pid"))
    host.engine.close()
    host.process.wait(timeout=10)  # the host polls every 2 s
    deadline = time.monotonic() + 5
    while alive(program) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(program), "the program outlived its host"
    assert running.done()
