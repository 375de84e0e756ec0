"""The SGLang server step: the flag map that `pulumi preview --diff` shows flag by flag, and start,
readiness, liveness and stop of a real emulated server (its failures told with their class and fix)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_stacks.components import server
from sglang_stacks.config.flags import flags_from_values, launch_values
from sglang_stacks.config.recorded import values_from_argv
from sglang_stacks.config.render import canonical_flags, render_argv, render_command
from sglang_stacks.config.stackfile import load_stack_spec
from sglang_stacks.errors import ClaimError, ServerError
from sglang_stacks.hostops import claim, process
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.server_failure import classify_failure
from tests._pulumi import free_port

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(path.name.split(".")[1] for path in (ROOT / "stacks").glob("Pulumi.*.yaml"))
BASELINE_ARGV = [
    "--model-path",
    "/shared/kimi-k2.5-int4",
    "--tp-size",
    "8",
    "--trust-remote-code",
    "--cuda-graph-max-bs",
    "128",
    "--disable-custom-all-reduce",
]


@pytest.mark.parametrize("stack", STACKS)
def test_the_recorded_launch_values_render_every_shipped_stacks_argv_again(stack: str) -> None:
    spec = load_stack_spec(stack, ROOT / "stacks")
    release = spec.environment.sglang_release
    argv = render_argv(spec.launch_flags(), release)

    values = launch_values(canonical_flags(spec.launch_flags(), release))

    assert render_argv(flags_from_values(values), release) == argv
    assert values_from_argv(argv, release) == values, "state of earlier versions upgrades to the same map"


def test_launch_values_keep_types_and_a_negative_value_keeps_its_flag_name() -> None:
    argv = ["--model-path", "/m", "--trust-remote-code", "--tp-size", "8", "--cuda-graph-bs", "1", "2", "4"]
    flags = flags_from_values(
        {**values_from_argv(argv, "0.5.8"), "chunked_prefill_size": -1, "random_seed": -1}
    )

    values = launch_values(canonical_flags(flags, "0.5.8"))

    assert values == {
        "model_path": "/m",
        "trust_remote_code": True,
        "tp_size": 8,
        "chunked_prefill_size": -1,
        "cuda_graph_bs": [1, 2, 4],
        "random_seed": -1,
    }
    assert "--chunked-prefill-size=-1" in render_argv(flags, "0.5.8")


def test_state_of_earlier_versions_keeps_its_flags_under_their_canonical_names() -> None:
    legacy = {
        "release": "0.5.8",
        "flags": {"--tp-size": "8", "--trust-remote-code": True, "--chunked-prefill-size=-1": True},
    }

    upgraded = server.ServerProvider().upgrade({**legacy, "launcher_module": "sglang_emulator"})

    assert upgraded["flags"] == {"tp_size": 8, "trust_remote_code": True, "chunked_prefill_size": -1}
    assert upgraded["runtime"] == "emulator", "the runtime earlier versions did not record"


def test_only_launch_inputs_replace_the_server_and_the_update_id_changes_nothing() -> None:
    provider = server.ServerProvider()
    olds = {
        "flags": {"tp_size": 8},
        "release": "0.5.8",
        "env": {},
        "python": "/venv/bin/python",
        "port": 30000,
        "update_id": "a",
        "log_dir": "/logs",
    }

    same = provider.diff("id", olds, {**olds, "update_id": "b"})
    new_flag = provider.diff("id", olds, {**olds, "flags": {"tp_size": 8.0, "mem_fraction_static": 0.88}})
    new_log_dir = provider.diff("id", olds, {**olds, "log_dir": "/other"})

    assert not same.changes
    assert new_flag.changes and new_flag.replaces == ["flags"] and new_flag.delete_before_replace
    assert new_log_dir.changes and not new_log_dir.replaces


def test_a_new_key_for_the_same_host_keeps_the_server_and_another_host_replaces_it() -> None:
    provider = server.ServerProvider()
    ssh = {
        "kind": "ssh",
        "host": "gpu1",
        "port": 22.0,
        "user": "me",
        "private_key": "old",
        "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5",
    }
    olds = {"flags": {"tp_size": 8}, "port": 30000, "connection": ssh}

    new_key = provider.diff("id", olds, {**olds, "connection": {**ssh, "private_key": "new", "port": 22}})
    new_host = provider.diff("id", olds, {**olds, "connection": {**ssh, "host": "gpu2"}})

    assert new_key.changes and not new_key.replaces
    assert new_host.replaces == ["connection"]


# Real emulated servers from here on: started on this machine through a local connection.


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Path]:
    """A host state folder; the claim leases the test took, and any server it left, end with it."""
    yield tmp_path
    claim.finish_all()
    marker = f"SGLANG_EMULATOR_STATE_DIR={tmp_path}/".encode()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes():
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except OSError:
            continue


def server_props(
    host: Path, *, argv: list[str] = BASELINE_ARGV, env: dict[str, str] | None = None, **changes: Any
) -> dict[str, Any]:
    """The server's inputs as the engine delivers them, for the emulator on this machine."""
    port = free_port()
    emulator = {
        "PYTHONPATH": str(ROOT),
        "SGLANG_EMULATOR_RELEASE": "0.5.8",
        "SGLANG_EMULATOR_TIME_SCALE": "0.002",
        "SGLANG_EMULATOR_STATE_DIR": str(host / "gpus"),
    }
    props = {
        "connection": {"kind": "local"},
        "stack": "baseline",
        "update_id": "u1",
        "state_dir": str(host / "state"),
        "log_dir": str(host / "state" / "logs"),
        "python": sys.executable,
        "launcher_module": "sglang_emulator",
        "runtime": "emulator",
        "release": "0.5.8",
        "installed_version": "0.5.8",
        "flags": as_the_engine_delivers(values_from_argv([*argv, "--port", str(port)], "0.5.8")),
        "env": {**emulator, **(env or {})},
        "port": port,
        "nvidia_smi": [
            "env",
            *(f"{k}={v}" for k, v in emulator.items()),
            sys.executable,
            "-m",
            "sglang_emulator.nvidia_smi",
        ],
        "ready_timeout_s": 60.0,
        "stop_timeout_s": 20.0,
    }
    props.update(changes)
    return props


def as_the_engine_delivers(values: dict[str, Any]) -> dict[str, Any]:
    """Launch values as a provider receives them: every number a float."""
    return {
        key: float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        for key, value in values.items()
    }


def start(props: dict[str, Any]) -> server.ServerOutputs:
    return server.start(server.ServerInputs.model_validate(props))


def running(started: server.ServerOutputs, ticks_offset: int = 0) -> process.Running:
    return process.Running(started.pid, started.start_ticks + ticks_offset)


def gpu_pids(props: dict[str, Any]) -> set[int]:
    from sglang_stacks.hostops.transport import run

    listed = run(
        Connection.local(),
        " ".join([*props["nvidia_smi"], "--query-compute-apps=pid", "--format=csv,noheader"]),
        timeout_s=30,
    )
    return {int(word) for word in listed.stdout.split()}


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def emulator_running(port: int) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sglang_emulator" in words and str(port).encode() in words:
            return True
    return False


@pytest.mark.integration
def test_started_server_is_ready_and_stop_waits_until_its_gpu_memory_is_free(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The log folder is under the host user's home, as the default (<host.state_dir>/logs) is.
    monkeypatch.setenv("HOME", str(host / "home"))
    monkeypatch.chdir(host)  # where a folder literally named ~ would appear
    props = server_props(host, log_dir="~/logs")
    conn = Connection.local()

    started = start(props)
    try:
        with urllib.request.urlopen(f"{started.url}/health_generate", timeout=10) as reply:
            assert reply.status == 200
        assert process.is_running(conn, running(started))
        assert not process.is_running(conn, running(started, 1))
        assert started.pid in gpu_pids(props)
        assert started.log_path.startswith("~/logs/baseline-")
        log = host / "home" / "logs" / Path(started.log_path).name
        assert "The server is fired up and ready to roll!" in log.read_text()
        assert not (host / "~").exists()
        flags = flags_from_values(props["flags"])
        assert started.launch_command == render_command(
            flags, "0.5.8", sys.executable, props["env"], "sglang_emulator"
        )
        owner = claim.read(conn, state_dir=props["state_dir"])
        assert owner is not None and (owner.stack, owner.server_pid) == ("baseline", started.pid)
        # The host's note of what it serves keeps each flag's type: an int flag stays an int.
        note = json.loads((host / "state" / "serving.json").read_text())
        assert note["flags"]["tp_size"] == 8 and type(note["flags"]["tp_size"]) is int
        assert type(note["flags"]["port"]) is int and type(note["pid"]) is int
    finally:
        process.stop(conn, started.pid, started.start_ticks, props["nvidia_smi"], 20.0)

    assert not process.is_running(conn, running(started))
    assert started.pid not in gpu_pids(props)
    assert not listening(props["port"])


@pytest.mark.integration
@pytest.mark.parametrize(
    ("argv", "env", "kind", "said"),
    [
        # Flags rendered for 0.5.8 on a host whose release split --cuda-graph-max-bs.
        (
            BASELINE_ARGV,
            {"SGLANG_EMULATOR_RELEASE": "0.5.23"},
            "bad_flag",
            "ambiguous option: --cuda-graph-max-bs",
        ),
        ([*BASELINE_ARGV, "--mem-fraction-static", "0.5"], {}, "out_of_memory", "Not enough memory"),
        (BASELINE_ARGV, {"NCCL_ALGO": "Tree"}, "nccl", "NCCL error in: all_reduce"),
        (
            [*BASELINE_ARGV, "--enable-flashinfer-allreduce-fusion"],
            {},
            "unsupported_gpu",
            "FlashInfer JIT failed",
        ),
        (
            BASELINE_ARGV,
            {"SGLANG_EMULATOR_FAULTS": json.dumps({"port_in_use": True})},
            "port_in_use",
            "address already in use",
        ),
    ],
)
def test_a_start_that_fails_names_the_class_the_log_and_the_fix_and_leaves_nothing_running(
    host: Path, argv: list[str], env: dict[str, str], kind: str, said: str
) -> None:
    props = server_props(host, argv=argv, env=env)

    with pytest.raises(ServerError) as raised:
        start(props)

    message = str(raised.value)
    assert (
        f"exited before it became ready ({kind}). Last log lines of {props['log_dir']}/baseline-" in message
    )
    assert said in message
    context = server.ServerInputs.model_validate(props).failure_context()
    assert message.rstrip().endswith(classify_failure(message, context).fix)
    assert max(len(line) for line in message.splitlines()) < 450, "long log lines are shortened"
    assert not emulator_running(props["port"])
    assert gpu_pids(props) == set()


@pytest.mark.integration
def test_a_server_that_hangs_is_stopped_at_the_ready_timeout(host: Path) -> None:
    props = server_props(
        host, env={"SGLANG_EMULATOR_FAULTS": json.dumps({"hang_at_phase": "weights"})}, ready_timeout_s=3.0
    )

    with pytest.raises(
        ServerError,
        match=r"was not ready within 3 s and was stopped, while loading the weights \(start_timeout\)",
    ) as raised:
        start(props)

    assert "hanging during startup phase 'weights'" in str(raised.value)
    assert "raise launch.ready_timeout_s from 3 to 6" in str(raised.value)
    assert not emulator_running(props["port"])


def test_a_missing_python_fails_the_start_with_its_class_and_fix(host: Path) -> None:
    props = server_props(host, python=str(host / "gone" / "bin" / "python"))

    with pytest.raises(ServerError) as raised:
        start(props)

    message = str(raised.value)
    assert "exited before it became ready (python_missing)" in message
    assert f"{host}/gone/bin/python" in message and "No such file or directory" in message
    assert "`pulumi refresh`" in message


@pytest.mark.integration
def test_a_server_left_behind_by_a_killed_update_is_stopped_before_the_next_launch(host: Path) -> None:
    props = server_props(host)
    conn = Connection.local()
    orphan = start(props)
    claim.finish_all()  # the update that launched it ended without recording it anywhere else

    started = start({**props, "update_id": "u2"})
    try:
        assert not process.is_running(conn, running(orphan))
        assert gpu_pids(props) == {started.pid}
    finally:
        process.stop(conn, started.pid, started.start_ticks, props["nvidia_smi"], 20.0)


@pytest.mark.integration
def test_an_update_killed_right_after_the_launch_leaves_a_server_the_claim_knows(host: Path) -> None:
    # The launch alone, as an update killed the moment it returns leaves it: the host program that
    # started the server noted it in the claim in the same run, so the next launch finds it.
    props = server_props(host)
    conn = Connection.local()
    inputs = server.ServerInputs.model_validate(props)
    claim.acquire(conn, "baseline", takeover=False, update_id="u1", state_dir=props["state_dir"])
    log_path = f"{props['log_dir']}/baseline-killed.log"
    orphan = process.launch(conn, server._launch(inputs, log_path))
    claim.finish_all()

    noted = claim.read(conn, state_dir=props["state_dir"])
    assert noted is not None and (noted.server_pid, noted.server_start_ticks) == (
        orphan.pid,
        orphan.start_ticks,
    )
    started = start({**props, "update_id": "u2"})
    try:
        assert not process.is_running(conn, orphan)
        assert gpu_pids(props) == {started.pid}
    finally:
        process.stop(conn, started.pid, started.start_ticks, props["nvidia_smi"], 20.0)


@pytest.mark.integration
def test_a_port_another_program_serves_stops_the_launch_before_it_is_fooled_by_that_program(
    host: Path,
) -> None:
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    stranger = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    port = stranger.server_address[1]
    props = server_props(host)
    props = {**props, "port": port, "flags": {**props["flags"], "port": port}}
    try:
        with pytest.raises(ServerError, match=rf"Port {port} on the local host is taken by another program"):
            start(props)
    finally:
        stranger.shutdown()
    assert not emulator_running(port)
    assert not list((host / "state" / "logs").glob("*.log"))


def test_a_pid_reused_by_another_process_is_never_stopped(tmp_path: Path) -> None:
    # The claim names the previous server by pid and start time; a process that merely has that
    # pid now (another start time, or not an SGLang process at all) is left alone.
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        started = int(Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])
        conn = Connection.local()
        smi = ["true"]
        process.stop(conn, bystander.pid, started + 1, smi, 5)
        process.stop(conn, bystander.pid, None, smi, 5)
        assert bystander.poll() is None
        process.stop(conn, bystander.pid, started, smi, 5)
        assert bystander.wait(timeout=10) is not None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_preview_that_cannot_know_the_python_yet_does_not_announce_a_replacement() -> None:
    # An in-place update of the environment (new emulator code) leaves its outputs unknown in a
    # preview; only a declared change (release, runtime, pins, flags) predicts a new server.
    from pulumi.output import Unknown

    provider = server.ServerProvider()
    olds = {"python": "/v/bin/python", "installed_version": "0.5.8", "runtime": "emulator", "flags": {}}
    unknown = {**olds, "python": Unknown(), "installed_version": Unknown()}  # type: ignore[no-untyped-call]

    env_only = provider.diff("id", olds, unknown)
    new_pins = provider.diff("id", {**olds, "extra_pins": []}, {**unknown, "extra_pins": ["x==1"]})

    assert not env_only.changes, "the server's outputs stay known, so the benchmark is not re-run"
    assert new_pins.replaces == ["extra_pins"]


@pytest.mark.integration
def test_a_replace_holds_the_host_before_it_stops_its_own_server(host: Path) -> None:
    """Two updates race for the host while one replaces its serving server: the replace's stop comes
    after its claim, so the other stack's takeover is refused (it stops nothing either) instead of
    winning a host whose server the first had already stopped for nothing."""
    props = server_props(host)
    conn = Connection.local()
    started = start(props)
    claim.finish_all()  # the update that launched it is over: the claim is idle, the server serves
    try:
        server.ServerProvider().delete_typed(server.ServerInputs.model_validate(props), started)

        with pytest.raises(ClaimError, match=r"Stack 'baseline' \(update u1, since .*\) is updating"):
            claim.acquire(conn, "eagle3-bs128", takeover=True, update_id="u9", state_dir=props["state_dir"])
        owner = claim.read(conn, state_dir=props["state_dir"])
        assert owner is not None and (owner.stack, owner.updating) == ("baseline", True)
    finally:
        process.stop(conn, started.pid, started.start_ticks, props["nvidia_smi"], 20.0)
