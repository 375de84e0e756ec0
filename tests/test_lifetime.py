"""How long an update's work lives: as long as its engine listens."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from sglang_stacks.hostops import lifetime


def test_the_engine_address_is_the_providers_argument() -> None:
    argv = ["-m", "127.0.0.1:35587"]
    assert lifetime.engine_address(["python", *argv]) == ("127.0.0.1", 35587)
    assert lifetime.engine_address(["python", "--logtostderr", "[::1]:4000"]) == ("::1", 4000)
    assert lifetime.engine_address(["pytest", "tests/test_lifetime.py"]) is None


def test_an_engine_that_stopped_listening_is_gone() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = listener.getsockname()
        assert lifetime.engine_alive(address)
    assert not lifetime.engine_alive(address)


def test_outside_a_provider_the_update_lives_with_the_first_parent() -> None:
    assert lifetime.update_alive()
    lifetime.watch_engine()  # no engine address here: nothing is watched, nothing ends
    assert lifetime.update_alive()


def test_a_provider_process_that_is_never_called_ends_with_its_engine() -> None:
    # The engine starts Pulumi's dynamic-provider plugin (a shell wrapper running `python -m
    # pulumi.dynamic <engine address>`) and may never call it; a killed CLI used to leave both
    # waiting for calls forever. The package's start hook watches the engine from the first moment.
    wrapper = shutil.which("pulumi-resource-pulumi-python")
    assert wrapper is not None, "Pulumi's Python plugin is not on PATH: run the tests with scripts/test.sh"
    with socket.socket() as engine:
        engine.bind(("127.0.0.1", 0))
        engine.listen()
        host, port = engine.getsockname()
        provider = subprocess.Popen(
            [wrapper, f"{host}:{port}"],
            env={**os.environ, "PULUMI_RUNTIME_VIRTUALENV": str(Path(sys.prefix))},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own: whatever it leaves is stopped below
        )
        try:
            assert provider.stdout is not None
            assert provider.stdout.readline().strip().isdigit()  # its own gRPC port: it serves
            assert provider.poll() is None
        except BaseException:
            _stop_group(provider)
            raise
    try:
        # Gone within a few of the watch's polls: the wrapper ends once its Python has.
        provider.wait(timeout=15)
    finally:
        _stop_group(provider)


def _stop_group(process: subprocess.Popen[str]) -> None:
    """Stops the wrapper and the Python it started (the wrapper alone would leave it behind)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
