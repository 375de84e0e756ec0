"""The Python language host the Pulumi engine talks to when it runs this project.

Pulumi's own host (`pulumi-language-python`) is a separate Go module that this project cannot
obtain from a module registry, so the bootstrap installs this one under that name instead. It
serves the engine's LanguageRuntime gRPC interface with the stubs shipped in the `pulumi` Python
SDK and runs the program exactly as Pulumi's host does: with the project's virtualenv Python and
Pulumi's own `pulumi-language-python-exec` script (from the SDK's release), passing the stack
config through PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS.

What it does not do: install dependencies (the bootstrap does), or report plugins needed by
installed packages (the engine then asks for none, so nothing is ever downloaded).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import types
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.json_format import MessageToDict


def _sdk_stubs(*names: str) -> list[Any]:
    """The SDK's generated gRPC modules ``names``, loaded without the rest of the SDK.

    ``pulumi.runtime.proto`` sits inside the ``pulumi`` package, whose import loads the whole SDK
    (0.3-0.4 s of CPU) although the stubs only import each other, relatively. The engine starts
    this host twice per pass, so the stubs' folder is loaded as a package of its own instead; its
    ``__init__`` (which imports every stub) does not run.
    """
    found = importlib.util.find_spec("pulumi")
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError("The pulumi SDK is not installed. Run the project's bootstrap script.")
    package = types.ModuleType("_pulumi_stubs")
    package.__path__ = [str(Path(found.submodule_search_locations[0], "runtime", "proto"))]
    sys.modules[package.__name__] = package
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


if TYPE_CHECKING:
    from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2
else:
    language_pb2, language_pb2_grpc, plugin_pb2 = _sdk_stubs(
        "language_pb2", "language_pb2_grpc", "plugin_pb2"
    )

HOST_VERSION = "0.1.0"
# Exit code of pulumi-language-python-exec after it has already shown the user an error.
EXIT_ERROR_ALREADY_SHOWN = 32
# How often the host asks whether its engine still listens (see `watch_engine`).
ENGINE_POLL_S = 2.0


def _options(info: language_pb2.ProgramInfo) -> dict[str, Any]:
    return MessageToDict(info.options) if info.HasField("options") else {}


def _python(info: language_pb2.ProgramInfo) -> str:
    """The interpreter of the project's virtualenv (Pulumi.yaml `runtime.options.virtualenv`)."""
    virtualenv = _options(info).get("virtualenv")
    if virtualenv:
        venv = Path(info.root_directory or ".", virtualenv)
        python = venv / "bin" / "python"
        if not python.exists():
            raise FileNotFoundError(
                f"The virtualenv {venv} named in Pulumi.yaml has no bin/python. "
                "Run the project's bootstrap script to create it."
            )
        return str(python)
    return shutil.which("python3") or sys.executable


def _exec_script() -> str:
    script = shutil.which("pulumi-language-python-exec")
    if script is None:
        raise FileNotFoundError(
            "pulumi-language-python-exec is not on PATH. Run the project's bootstrap script."
        )
    return script


class LanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    """Serves the engine's requests; every method not defined here answers UNIMPLEMENTED."""

    def __init__(self, engine_address: str) -> None:
        self.engine_address = engine_address
        self.programs: list[subprocess.Popen[bytes]] = []

    # Method names are the gRPC service's.
    def Handshake(self, request: Any, context: Any) -> Any:
        if request.engine_address:
            self.engine_address = request.engine_address
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        return plugin_pb2.PluginInfo(version=HOST_VERSION)

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPluginsResponse(plugins=[])

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPackagesResponse(packages=[])

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        return language_pb2.GetProgramDependenciesResponse(dependencies=[])

    def About(self, request: Any, context: Any) -> Any:
        python = _python(request.info)
        version = subprocess.run(
            [python, "--version"], capture_output=True, text=True, check=False
        ).stdout.split()[-1:]
        return language_pb2.AboutResponse(executable=python, version="".join(version))

    def InstallDependencies(self, request: Any, context: Any) -> Any:
        message = "Dependencies are installed by the project's bootstrap script; nothing to do.\n"
        yield language_pb2.InstallDependenciesResponse(stdout=message.encode())

    def RuntimeOptionsPrompts(self, request: Any, context: Any) -> Any:
        return language_pb2.RuntimeOptionsResponse(prompts=[])

    def Run(self, request: Any, context: Any) -> Any:
        try:
            argv = [_python(request.info), "-u", _exec_script(), *self._exec_flags(request)]
        except FileNotFoundError as error:
            return language_pb2.RunResponse(error=str(error))
        env = dict(os.environ)
        env["PULUMI_CONFIG"] = json.dumps(dict(request.config))
        env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
        env.pop("PYTHONHOME", None)
        # Program output goes to this process's stdout/stderr, which the engine shows the user.
        program = subprocess.Popen(argv, env=env, cwd=request.pwd or None)
        self.programs.append(program)
        code = program.wait()
        self.programs.remove(program)
        if code == 0:
            return language_pb2.RunResponse()
        if code == EXIT_ERROR_ALREADY_SHOWN:
            return language_pb2.RunResponse(bail=True)
        return language_pb2.RunResponse(error=f"Program exited with non-zero exit code: {code}")

    def _exec_flags(self, request: Any) -> list[str]:
        flags = [
            f"--monitor={request.monitor_address}",
            f"--engine={self.engine_address}",
            f"--project={request.project}",
            f"--stack={request.stack}",
            f"--pwd={request.pwd}",
            f"--dry_run={'true' if request.dryRun else 'false'}",
            f"--parallel={request.parallel}",
            f"--organization={request.organization}",
        ]
        if request.info.root_directory:
            flags.append(f"--root_directory={request.info.root_directory}")
        program = request.info.program_directory or request.pwd or "."
        if request.info.entry_point and request.info.entry_point != ".":
            program = os.path.join(program, request.info.entry_point)
        return [*flags, program, *request.args]


def engine_gone(address: str) -> bool:
    """Whether the engine at ``host:port`` refuses connections: its CLI has ended."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False
    return False


def watch_engine(host: LanguageHost, server: grpc.Server) -> None:
    """Ends the program and this host once the engine is gone. A CLI killed with SIGKILL (or a
    second Ctrl-C) does not stop its plugins: without this, the program and this host would wait
    for it forever."""
    while host.engine_address and not engine_gone(host.engine_address):
        threading.Event().wait(ENGINE_POLL_S)
    if not host.engine_address:
        return
    for program in list(host.programs):
        program.terminate()
    server.stop(grace=1)


def main() -> int:
    parser = argparse.ArgumentParser(prog="pulumi-language-python")
    parser.add_argument("engine_address", nargs="?", default="")
    # The engine may pass flags of Pulumi's own host (tracing, root); they change nothing here.
    args, _ = parser.parse_known_args()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    host = LanguageHost(args.engine_address)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    # The engine reads the port from the first line of stdout.
    print(port, flush=True)
    # The engine stops its plugins with SIGINT once it is done with them; that is a normal exit.
    signal.signal(signal.SIGINT, lambda *_: server.stop(grace=1))
    signal.signal(signal.SIGTERM, lambda *_: server.stop(grace=1))
    threading.Thread(target=watch_engine, args=(host, server), daemon=True).start()
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
