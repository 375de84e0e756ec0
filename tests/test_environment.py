"""PythonEnvironment: venvs really created on this machine, the emulator copied in, a stand-in
SGLang wheel installed by the real pip, and the resource driven through the real Pulumi engine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import sglang_stacks.hostops.environment as hostenv
from sglang_stacks.components.environment import (
    LAUNCHER_MODULES,
    EnvironmentInputs,
    EnvironmentOutputs,
    PythonEnvironment,
    PythonEnvironmentProvider,
    default_venv_path,
    emulator_digest,
    environment_args,
)
from sglang_stacks.errors import HostError, SpecError
from tests._pulumi import Workspace
from tests.sshd import start_sshd

Props = dict[str, Any]
LOCAL = {"kind": "local"}


def props_for(venv: Path | str, runtime: str = "emulator", release: str = "0.5.8", **changes: Any) -> Props:
    """The inputs PythonEnvironment gives its provider."""
    props: dict[str, Any] = {
        "connection": LOCAL,
        "runtime": runtime,
        "release": release,
        "extra_pins": [],
        "requested_venv_path": str(venv),
        "emulator_digest": emulator_digest() if runtime == "emulator" else None,
        "install_timeout_s": 600,
        "launcher_module": LAUNCHER_MODULES[runtime],
        "venv_path": None,
        "python": None,
        "sglang_version": None,
    }
    props.update(changes)
    return props


def host_python(python: str, code: str, **env: str) -> str:
    """Runs ``code`` with the environment's python from /, so the checkout is not on sys.path."""
    done = subprocess.run(
        [python, "-c", code],
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def emulator_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Props, Props]]:
    """One emulator environment, installed once for the module: (inputs, outputs).

    It is installed with this interpreter's site-packages (which hold aiohttp) on PYTHONPATH, as a
    caller's environment might have it: pip must still install aiohttp into the new venv.
    """
    venv = tmp_path_factory.mktemp("envs") / "emulator"
    props = props_for(venv)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(Path(aiohttp.__file__).parent.parent))
        outs = PythonEnvironmentProvider().create(props).outs or {}
    yield props, outs
    shutil.rmtree(venv, ignore_errors=True)


def test_emulator_environment_holds_the_emulator_and_the_loadgen_client(
    emulator_env: tuple[Props, Props],
) -> None:
    props, outs = emulator_env
    assert outs["venv_path"] == props["requested_venv_path"]
    assert outs["python"] == f"{props['requested_venv_path']}/bin/python"
    assert outs["sglang_version"] == "0.5.8"
    assert outs["launcher_module"] == "sglang_emulator"
    located = host_python(
        outs["python"],
        "import aiohttp, uvloop, sglang_emulator, sglang_flags; "
        "print(aiohttp.__version__, sglang_emulator.__file__)",
    )
    version, module_file = located.split()
    assert version == "3.14.5"
    assert module_file.startswith(props["requested_venv_path"] + "/lib/")


def test_second_deploy_of_a_ready_environment_installs_nothing(emulator_env: tuple[Props, Props]) -> None:
    props, outs = emulator_env
    venv = Path(props["requested_venv_path"])
    install_log = venv / ".sglang-stacks-install.log"

    def installed() -> dict[str, int]:
        """Each installed distribution's record, as pip writes it again on any install."""
        return {
            str(p.relative_to(venv)): p.stat().st_mtime_ns
            for p in venv.glob("lib/python*/site-packages/*.dist-info")
        }

    before = (install_log.stat().st_mtime_ns, installed())
    again = PythonEnvironmentProvider().update(outs["venv_path"], outs, props).outs
    assert again == outs
    # Nothing installed: no install logged, and no distribution written again. (It took 3.2 s beside
    # two busy processes on two cores, so its time is no measure; the installs are.)
    assert (install_log.stat().st_mtime_ns, installed()) == before
    assert before[1]  # the environment holds distributions to compare


def test_refresh_sees_the_emulated_version_and_drops_a_vanished_environment(
    emulator_env: tuple[Props, Props], tmp_path: Path
) -> None:
    _, outs = emulator_env
    provider = PythonEnvironmentProvider()
    found = provider.read(outs["venv_path"], {**outs, "sglang_version": "stale"})
    assert found.id == outs["venv_path"]
    assert found.outs is not None and found.outs["sglang_version"] == "0.5.8"

    vanished = {**outs, "venv_path": str(tmp_path / "removed-env")}
    gone = provider.read(vanished["venv_path"], vanished)
    assert gone.id is None and gone.outs == {}


def test_changed_emulator_code_is_copied_into_the_same_environment(
    emulator_env: tuple[Props, Props], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    props, outs = emulator_env
    checkout = tmp_path / "checkout"
    for package in hostenv.EMULATOR_PACKAGES:
        shutil.copytree(hostenv._ROOT / package, checkout / package)
    (checkout / "sglang_emulator" / "added_in_this_test.py").write_text("MARK = 'new code'\n")
    monkeypatch.setattr(hostenv, "_ROOT", checkout)

    new_props = {**props, "emulator_digest": emulator_digest(checkout)}
    diff = PythonEnvironmentProvider().diff(outs["venv_path"], outs, new_props)
    assert diff.changes and diff.replaces == []

    updated = PythonEnvironmentProvider().update(outs["venv_path"], outs, new_props).outs or {}
    assert updated["emulator_digest"] == new_props["emulator_digest"] != outs["emulator_digest"]
    assert updated["python"] == outs["python"]
    assert (
        host_python(outs["python"], "import sglang_emulator.added_in_this_test as m; print(m.MARK)")
        == "new code"
    )


def write_stand_in_wheel(
    folder: Path, name: str, version: str, module_text: str, requires: tuple[str, ...] = ()
) -> None:
    """A minimal wheel, so the real pip installs ``name`` (and ``requires``) without reaching any
    package index."""
    dist = f"{name}-{version}.dist-info"
    requirements = "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{name}/__init__.py": module_text,
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nProvides-Extra: all\n{requirements}"
        ),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")


STAND_IN_SGLANG = """\
from pathlib import Path

with Path(__file__).with_name("imports.log").open("a") as log:
    log.write("imported\\n")
__version__ = "0.5.8"
"""


def imports_of_sglang(venv: Path) -> int:
    """How often the stand-in sglang in ``venv`` was imported."""
    (log,) = venv.glob("lib/python*/site-packages/sglang/imports.log")
    return len(log.read_text().splitlines())


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip on this host sees only a folder holding a stand-in sglang 0.5.8 wheel, which requires a
    stand-in dependency and records each import of it beside its package."""
    index = tmp_path / "index"
    index.mkdir()
    write_stand_in_wheel(index, "sglang", "0.5.8", STAND_IN_SGLANG, requires=("standindep",))
    write_stand_in_wheel(index, "standindep", "1.0", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def test_sglang_runtime_installs_the_pinned_release_with_pip(local_index: Path, tmp_path: Path) -> None:
    outs = PythonEnvironmentProvider().create(props_for(tmp_path / "real", runtime="sglang")).outs or {}
    assert outs["sglang_version"] == "0.5.8"
    assert outs["launcher_module"] == "sglang.launch_server"
    assert host_python(outs["python"], "import sglang; print(sglang.__file__)").startswith(
        str(tmp_path / "real")
    )


def test_refresh_reads_sglangs_metadata_and_a_removed_requirement_is_installed_again(
    local_index: Path, tmp_path: Path
) -> None:
    provider = PythonEnvironmentProvider()
    venv = tmp_path / "real"
    props = props_for(venv, runtime="sglang")
    outs = provider.create(props).outs or {}
    # Installing proves that SGLang imports; a refresh reads its metadata and does not import it.
    assert imports_of_sglang(venv) == 1
    found = provider.read(outs["venv_path"], {**props, **outs, "sglang_version": "stale"})
    assert found.outs is not None and found.outs["sglang_version"] == "0.5.8"
    assert imports_of_sglang(venv) == 1

    # A requirement removed behind the tool's back: the refresh drops the environment, and the
    # next up (a create) installs what is missing.
    subprocess.run([outs["python"], "-m", "pip", "uninstall", "-y", "-q", "standindep"], check=True)
    assert provider.read(outs["venv_path"], {**props, **outs}).id is None
    again = provider.create(props).outs or {}
    assert again["sglang_version"] == "0.5.8"
    assert host_python(again["python"], "import standindep; print(standindep.__name__)") == "standindep"
    assert provider.read(again["venv_path"], {**props, **again}).id == again["venv_path"]


def test_pip_failure_names_the_release_and_shows_pips_last_lines(local_index: Path, tmp_path: Path) -> None:
    with pytest.raises(HostError) as caught:
        PythonEnvironmentProvider().create(
            props_for(tmp_path / "missing", runtime="sglang", release="0.5.23")
        )
    message = str(caught.value)
    assert "SGLang 0.5.23" in message
    assert "sglang[all]==0.5.23" in message
    assert "No matching distribution" in message
    assert message.rstrip().endswith("run the update again.")
    # Nothing half-made passes for ready: the marker is only written after a successful install.
    assert not (tmp_path / "missing" / ".sglang-stacks-env").exists()


@pytest.mark.parametrize(
    ("change", "replaces"),
    [
        ({"release": "0.5.23"}, ["release"]),
        ({"extra_pins": ["flashinfer-python==0.2.9"]}, ["extra_pins"]),
        ({"requested_venv_path": "/elsewhere/env"}, ["requested_venv_path"]),
        ({"runtime": "sglang"}, ["runtime"]),
        ({"connection": {"kind": "ssh", "host": "gpu-1", "port": 22, "user": "root"}}, ["connection"]),
        ({"install_timeout_s": 60}, []),
    ],
)
def test_diff_replaces_for_another_environment_and_updates_otherwise(
    change: Props, replaces: list[str]
) -> None:
    olds = {
        **props_for("/env"),
        "requested_venv_path": "/env",
        "venv_path": "/abs/env",
        "python": "/abs/env/bin/python",
    }
    diff = PythonEnvironmentProvider().diff("/abs/env", olds, {**props_for("/env"), **change})
    assert diff.changes
    assert diff.replaces == replaces


def test_diff_of_the_same_inputs_is_no_change() -> None:
    olds = {**props_for("~/env"), "requested_venv_path": "~/env", "venv_path": "/home/gpu/env"}
    assert not PythonEnvironmentProvider().diff("/home/gpu/env", olds, props_for("~/env")).changes


def test_new_key_for_the_same_host_updates_in_place() -> None:
    ssh = {"kind": "ssh", "host": "gpu-1", "port": 22.0, "user": "root", "private_key": "old"}
    olds = {**props_for("/env", connection=ssh), "requested_venv_path": "/env"}
    news = props_for("/env", connection={**ssh, "port": 22, "private_key": "new"})
    diff = PythonEnvironmentProvider().diff("/env", olds, news)
    assert diff.changes and diff.replaces == []


def test_state_of_the_previous_version_validates() -> None:
    # As the previous version stored it: venv_path resolved, the folder asked for beside it.
    old = {
        **props_for("~/env"),
        "connection": {"kind": "ssh", "host": "gpu-1", "port": 22.0, "user": "root", "private_key": "k"},
        "venv_path": "/home/gpu/env",
        "requested_venv_path": "~/env",
        "install_timeout_s": 600.0,
        "python": "/home/gpu/env/bin/python",
        "sglang_version": "0.5.8",
    }
    provider = PythonEnvironmentProvider()
    inputs = EnvironmentInputs.model_validate(provider.upgrade(old))
    outputs = EnvironmentOutputs.model_validate(provider.upgrade(old))
    assert (inputs.requested_venv_path, outputs.venv_path) == ("~/env", "/home/gpu/env")
    assert inputs.connection.port == 22 and isinstance(inputs.connection.port, int)
    # The earliest states had no requested_venv_path: the folder asked for was venv_path.
    earliest = {**old, "requested_venv_path": None, "venv_path": "~/env"}
    assert EnvironmentInputs.model_validate(provider.upgrade(earliest)).requested_venv_path == "~/env"
    # Registered props of the sglang runtime: the outputs and emulator digest are None.
    registered = EnvironmentInputs.model_validate(props_for("/env", runtime="sglang"))
    assert (registered.emulator_digest, registered.extra_pins) == (None, ())
    assert not provider.diff(
        "/home/gpu/env", old, {**props_for("~/env"), "connection": old["connection"]}
    ).changes


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"extra_pins": ["flashinfer==0.2.9; rm -rf ~"]}, "extra_pins entry 'flashinfer==0.2.9; rm -rf ~'"),
        ({"extra_pins": ["$(reboot)==1"]}, "extra_pins entry '$(reboot)==1'"),
        ({"extra_pins": "torch==2.8.0"}, "extra_pins is the string 'torch==2.8.0'"),
        ({"release": "0.5.8 && reboot"}, "sglang_release '0.5.8 && reboot'"),
        ({"runtime": "vllm"}, "runtime 'vllm'"),
        ({"runtime": "emulator", "release": "0.4.0"}, "'0.4.0' is not one the emulator emulates"),
        ({"venv_path": "relative/env"}, "venv path 'relative/env'"),
    ],
)
def test_bad_inputs_are_refused_naming_the_value(kwargs: Props, named: str) -> None:
    args: dict[str, Any] = {"connection": LOCAL, "runtime": "sglang", "release": "0.5.8", **kwargs}
    with pytest.raises(SpecError) as caught:
        PythonEnvironment("env", environment_args(**args))
    assert named in str(caught.value)


def test_default_folder_is_shared_by_equal_pins_and_differs_with_other_pins() -> None:
    base = default_venv_path("sglang", "0.5.8", ["a==1", "b==2"])
    assert base.startswith("~/.sglang-stacks/envs/sglang-0.5.8-")
    assert default_venv_path("sglang", "0.5.8", ["b==2", "a==1"]) == base
    assert default_venv_path("sglang", "0.5.8", ["a==1"]) != base
    assert default_venv_path("emulator", "0.5.8").startswith("~/.sglang-stacks/envs/emulator-0.5.8-")


PROGRAM = """
import json
import os

import pulumi

from sglang_stacks.components.environment import PythonEnvironment, environment_args

env = PythonEnvironment(
    "env",
    environment_args(
        pulumi.Output.secret(json.loads(os.environ["TEST_ENV_CONNECTION"])),
        "emulator",
        os.environ["TEST_ENV_RELEASE"],
        venv_path=os.environ["TEST_ENV_VENV"],
    ),
)
pulumi.export("python", env.output(lambda o: o.python))
pulumi.export("sglang_version", env.output(lambda o: o.sglang_version))
pulumi.export("launcher_module", env.input(lambda i: i.launcher_module))
pulumi.export("venv_path", env.output(lambda o: o.venv_path))
"""


@pytest.mark.integration
def test_engine_installs_once_refresh_notices_removal_and_destroy_keeps_the_env(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "hosts" / "emulator-env"
    monkeypatch.setenv("TEST_ENV_CONNECTION", json.dumps(LOCAL))
    monkeypatch.setenv("TEST_ENV_RELEASE", "0.5.23")
    monkeypatch.setenv("TEST_ENV_VENV", str(venv))
    workspace.use_program(PROGRAM)
    workspace.init_stack("env")

    workspace.run("up", "--yes", "-s", "env")
    outputs = workspace.outputs("env")
    assert outputs == {
        "python": f"{venv}/bin/python",
        "sglang_version": "0.5.23",
        "launcher_module": "sglang_emulator",
        "venv_path": str(venv),
    }

    started = time.monotonic()
    workspace.run("up", "--yes", "--expect-no-changes", "-s", "env")
    assert time.monotonic() - started < 60

    shutil.rmtree(venv)
    workspace.run("refresh", "--yes", "-s", "env")
    preview = workspace.json("preview", "--json", "-s", "env")
    assert preview["changeSummary"] == {"create": 1, "same": 1}
    workspace.run("up", "--yes", "-s", "env")
    assert host_python(outputs["python"], "import sglang_flags; print('ok')") == "ok"

    workspace.run("destroy", "--yes", "-s", "env")
    assert (venv / "bin" / "python").exists()


@pytest.mark.integration
def test_engine_over_ssh_keeps_the_private_key_out_of_the_state(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "ssh-host" / "emulator-env"
    with start_sshd() as server:
        conn = server.connection()
        fields = {
            "kind": "ssh",
            "host": conn.host,
            "port": conn.port,
            "user": conn.user,
            "private_key": conn.private_key,
            "host_key": conn.host_key,
        }
        monkeypatch.setenv("TEST_ENV_CONNECTION", json.dumps(fields))
        monkeypatch.setenv("TEST_ENV_RELEASE", "0.5.8")
        monkeypatch.setenv("TEST_ENV_VENV", str(venv))
        workspace.use_program(PROGRAM)
        workspace.init_stack("ssh")
        workspace.run("up", "--yes", "-s", "ssh")
        assert workspace.outputs("ssh")["sglang_version"] == "0.5.8"
        workspace.run("refresh", "--yes", "--expect-no-changes", "-s", "ssh")

        key_line = server.client_key.strip().splitlines()[2]
        for state_file in workspace.backend.rglob("*"):
            if state_file.is_file():
                assert key_line not in state_file.read_text(errors="replace"), state_file.name
