"""PythonEnvironment: the virtualenv on the GPU host that holds the pinned SGLang release (or, on
the emulator host, the project's SGLang emulator), installed once and checked on every refresh.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, get_args

import pulumi

from sglang_flags import known_releases, nearest_releases
from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.errors import SpecError
from sglang_stacks.hostops import environment as hostenv
from sglang_stacks.hostops.environment import EMULATOR_PACKAGES, LOADGEN_PINS, emulator_digest
from sglang_stacks.resources.provider import REPLACES, UPDATES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for

__all__ = [
    "EMULATOR_PACKAGES",
    "LAUNCHER_MODULES",
    "LOADGEN_PINS",
    "EnvironmentArgs",
    "EnvironmentInputs",
    "EnvironmentOutputs",
    "PythonEnvironment",
    "PythonEnvironmentProvider",
    "Runtime",
    "default_venv_path",
    "emulator_digest",
    "environment_args",
]

Runtime = Literal["sglang", "emulator"]
"""``sglang``: the real SGLang from the package index; ``emulator``: the project's stand-in."""

LAUNCHER_MODULES: dict[str, str] = {"sglang": "sglang.launch_server", "emulator": "sglang_emulator"}

_OPERATOR = r"(===|==|>=|<=|~=|!=|<|>)"
_PIN = re.compile(
    rf"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?"
    rf"{_OPERATOR}[A-Za-z0-9.*+!_-]+(,{_OPERATOR}[A-Za-z0-9.*+!_-]+)*$"
)


_EMULATOR_FOLDER_PINS = ("httpx==0.28.1",)
"""What emulator environment folders are named after, for good: the load generator's first pin set.
Its packages (``LOADGEN_PINS``) are installed in place when they change, as the emulator's code is,
so an upgrade of this tool never moves a serving emulator to a new folder (and a new server)."""


def default_venv_path(runtime: str, release: str, extra_pins: Sequence[str] = ()) -> str:
    """``~/.sglang-stacks/envs/<runtime>-<release>-<digest of the pins>``: stacks that ask for the
    same software share one environment, and different pins never share one. (The emulator's
    folder keeps one name per release: its pins are the tool's own, updated in place.)"""
    if runtime == "emulator":
        pins = list(_EMULATOR_FOLDER_PINS)
    else:
        pins = hostenv.effective_pins(runtime, release, extra_pins)
    digest = hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:10]
    return f"~/.sglang-stacks/envs/{runtime}-{release}-{digest}"


def _validate(runtime: str, release: str, extra_pins: Sequence[str], venv_path: str | None) -> None:
    if runtime not in get_args(Runtime):
        raise SpecError(
            f"environment runtime {runtime!r} is not known; allowed: 'sglang' (real SGLang) or "
            "'emulator' (the project's stand-in). Set the host kind that selects it accordingly."
        )
    if not hostenv.is_release(release):
        raise SpecError(
            f"environment.sglang_release {release!r} is not a version; write it as SGLang publishes it, "
            "like '0.5.8'."
        )
    if runtime == "emulator" and release not in known_releases():
        raise SpecError(
            f"environment.sglang_release {release!r} is not one the emulator emulates; the nearest it "
            f"knows are {' and '.join(nearest_releases(release))}. Pick one of them, or deploy to a "
            "real GPU host."
        )
    if isinstance(extra_pins, str):
        raise SpecError(
            f"environment.extra_pins is the string {extra_pins!r}; it must be a list. Write it as a "
            "list of requirements, like ['flashinfer-python==0.2.9']."
        )
    for pin in extra_pins:
        if not isinstance(pin, str) or not _PIN.match(pin):
            raise SpecError(
                f"environment.extra_pins entry {pin!r} is not a plain pip requirement; allowed: a package "
                "name, optional [extras] and version clauses, with no spaces, quotes or shell characters. "
                "Write it like 'flashinfer-python==0.2.9'."
            )
    if venv_path is not None and (
        not (venv_path.startswith("/") or venv_path.startswith("~/"))
        or any(ord(ch) < 32 for ch in venv_path)
        or venv_path.rstrip("/") in ("", "~")
    ):
        raise SpecError(
            f"environment venv path {venv_path!r} is not a folder below / or ~/ on the host. "
            "Give an absolute path or one starting with ~/, or leave it unset for the default."
        )


class EnvironmentInputs(HostInputs):
    """What the environment is made of; another runtime, release, pin set or folder is another
    environment."""

    runtime: Annotated[Runtime, REPLACES]
    """What serves: the real SGLang or the emulator."""
    release: Annotated[str, REPLACES]
    """The SGLang release installed (emulated, on the emulator)."""
    extra_pins: Annotated[tuple[str, ...], REPLACES] = ()
    """More pip requirements next to SGLang (not for the emulator)."""
    requested_venv_path: Annotated[str, REPLACES]
    """The venv folder as asked for (``~/`` is the host user's home); the constructor's
    ``venv_path``. The ``venv_path`` output is the same folder, absolute."""
    emulator_digest: Annotated[str | None, UPDATES] = None
    """sha256 of this checkout's emulator packages: new emulator code is copied in place."""
    loadgen_pins: Annotated[tuple[str, ...], UPDATES] = ()
    """The load generator's packages in an emulator environment: new ones are installed in place."""
    install_timeout_s: Annotated[float, UPDATES] = 3600.0
    """How long one pip install may take on the host."""
    launcher_module: Annotated[str, UPDATES]
    """What ``python -m`` launches the server with (known before the environment exists)."""


class EnvironmentOutputs(Props):
    """The environment as found on the host."""

    venv_path: str
    """The venv folder on the host, absolute."""
    python: str
    """Absolute path of the venv's python on the host."""
    sglang_version: str
    """The SGLang release actually installed (emulated, on the emulator)."""


def _outputs(installed: hostenv.Installed) -> EnvironmentOutputs:
    return EnvironmentOutputs(
        venv_path=installed.venv_path,
        python=f"{installed.venv_path}/bin/python",
        sglang_version=installed.version,
    )


def _converge(inputs: EnvironmentInputs) -> EnvironmentOutputs:
    _validate(inputs.runtime, inputs.release, inputs.extra_pins, inputs.requested_venv_path)
    installed = hostenv.converge(
        inputs.connection,
        inputs.requested_venv_path,
        runtime=inputs.runtime,
        release=inputs.release,
        extra_pins=inputs.extra_pins,
        install_timeout_s=inputs.install_timeout_s,
    )
    return _outputs(installed)


class PythonEnvironmentProvider(TypedProvider[EnvironmentInputs, EnvironmentOutputs]):
    """Installs on create and update (only when the venv's marker says so, proving that SGLang
    imports); refresh reads SGLang's version and requirements from the environment's metadata (the
    emulator answers ``--version``) and drops a vanished or broken one; delete leaves the venv."""

    gathers_with = HOST_READS

    inputs = EnvironmentInputs
    outputs = EnvironmentOutputs

    def resource_id(self, inputs: EnvironmentInputs, outputs: EnvironmentOutputs) -> str:
        return outputs.venv_path

    def upgrade(self, props: Mapping[str, object]) -> dict[str, object]:
        # The earliest states recorded only the folder as asked for, under venv_path.
        if props.get("requested_venv_path") is None:
            return {**props, "requested_venv_path": props.get("venv_path")}
        return dict(props)

    def create_typed(self, inputs: EnvironmentInputs) -> EnvironmentOutputs:
        return _converge(inputs)

    def update_typed(
        self, olds: EnvironmentOutputs, old_inputs: EnvironmentInputs, news: EnvironmentInputs
    ) -> EnvironmentOutputs:
        return _converge(news)

    def read_typed(self, inputs: EnvironmentInputs, outputs: EnvironmentOutputs) -> EnvironmentOutputs | None:
        # Gone or broken: refresh drops it, and the next up installs it again.
        found = hostenv.read(inputs.connection, outputs.venv_path, inputs.runtime, inputs.release)
        return None if found is None else outputs.model_copy(update={"sglang_version": found.version})

    # Delete leaves the venv on purpose: every stack that asks for the same release and pins
    # shares this folder, and reinstalling SGLang takes many minutes.


EnvironmentArgs = args_for(EnvironmentInputs)
"""`PythonEnvironment`'s arguments: the fields of `EnvironmentInputs`, each a value or an Output of
one; `environment_args` derives them from what a stack declares."""


def environment_args(
    connection: pulumi.Input[Any],
    runtime: Runtime,
    release: str,
    extra_pins: Sequence[str] = (),
    venv_path: str | None = None,
) -> Args[EnvironmentInputs]:
    """The environment a stack declares (``runtime``, ``release``, ``extra_pins``, the folder, by
    default `default_venv_path`), with what follows from it: the launcher, and on the emulator this
    checkout's emulator code and the load generator's packages. SpecError for a declaration that
    cannot be installed."""
    _validate(runtime, release, extra_pins, venv_path)
    emulated = runtime == "emulator"
    return EnvironmentArgs(
        connection=connection,
        runtime=runtime,
        release=release,
        extra_pins=tuple(extra_pins),
        requested_venv_path=venv_path or default_venv_path(runtime, release, extra_pins),
        emulator_digest=emulator_digest() if emulated else None,
        loadgen_pins=LOADGEN_PINS if emulated else (),
        launcher_module=LAUNCHER_MODULES[runtime],
    )


class PythonEnvironment(
    TypedResource[EnvironmentInputs, EnvironmentOutputs], module="sglang", name="PythonEnvironment"
):
    """A virtualenv on the GPU host with the pinned SGLang release, or the project's emulator; its
    outputs are `EnvironmentOutputs`.

    ``runtime="sglang"`` installs ``sglang[all]==<release>`` and ``extra_pins`` with pip.
    ``runtime="emulator"`` copies ``sglang_flags``, ``sglang_world`` and ``sglang_emulator`` from this
    checkout into the venv and installs the load generator's packages (``LOADGEN_PINS``); ``extra_pins``
    (GPU libraries) do not apply to it and are ignored. Deploying again when the environment is already
    right installs nothing: a marker in the venv records what was installed, and the version is asked again.

    Changing the runtime, release, pins, folder or host replaces the resource; changed emulator
    code is copied in place. Destroying it leaves the venv on the host, because every stack that
    asks for the same software shares it and reinstalling SGLang takes many minutes.
    """

    def __init__(
        self, name: str, args: Args[EnvironmentInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(PythonEnvironmentProvider(), name, args, opts)
