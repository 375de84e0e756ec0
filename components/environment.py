"""PythonEnvironment: the virtualenv on the GPU host that holds the pinned SGLang release (or, on
the emulator host, the project's SGLang emulator), installed once and checked on every refresh.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import pulumi
import pulumi.dynamic as dynamic

from components._resource import connect, connection_diff, keep_connection_secret, plain_errors, tail
from components._transport import Connection, quote, quote_path, run, upload
from components.errors import HostError, SpecError
from sglang_flags import known_releases, nearest_releases

__all__ = ["EMULATOR_PACKAGES", "LOADGEN_PINS", "PythonEnvironment", "Runtime", "default_venv_path"]

Runtime = Literal["sglang", "emulator"]
"""``sglang``: the real SGLang from the package index; ``emulator``: the project's stand-in."""

EMULATOR_PACKAGES = ("sglang_flags", "sglang_emulator")
"""The stdlib-only packages copied from this checkout into an emulator environment."""

LOADGEN_PINS = ("httpx==0.28.1",)
"""What the benchmark's load generator needs next to the emulator; it runs with the env's python."""

LAUNCHER_MODULES: dict[str, str] = {"sglang": "sglang.launch_server", "emulator": "sglang_emulator"}

PROBE_TIMEOUT_S = 120.0
# Waiting for another update that installs into the same folder; an install can take this long.
LOCK_WAIT_S = 3600
_MARKER = ".sglang-stacks-env"
_INSTALL_LOG = ".sglang-stacks-install.log"
_ROOT = Path(__file__).resolve().parent.parent
_RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*([.+!_-]?[A-Za-z0-9]+)*$")
_OPERATOR = r"(===|==|>=|<=|~=|!=|<|>)"
_PIN = re.compile(
    rf"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?"
    rf"{_OPERATOR}[A-Za-z0-9.*+!_-]+(,{_OPERATOR}[A-Za-z0-9.*+!_-]+)*$"
)
_EXIT_VENV, _EXIT_PIP, _EXIT_LOCK, _EXIT_SITE = 10, 11, 12, 13
# Every script works from / without the caller's Python search path, so a checkout in the
# working folder (or another venv on PYTHONPATH) can neither stand in for what the environment
# holds nor make pip think a requirement is already there.
_ISOLATED = "unset PYTHONPATH PYTHONHOME PIP_TARGET PIP_PREFIX PIP_USER\ncd / || exit 2\n"


def default_venv_path(runtime: str, release: str, extra_pins: Sequence[str] = ()) -> str:
    """``~/.sglang-stacks/envs/<runtime>-<release>-<digest of the pins>``: stacks that ask for the
    same software share one environment, and different pins never share one."""
    pins = _effective_pins(runtime, release, extra_pins)
    digest = hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:10]
    return f"~/.sglang-stacks/envs/{runtime}-{release}-{digest}"


def _effective_pins(runtime: str, release: str, extra_pins: Sequence[str]) -> list[str]:
    """The pip requirements the environment is made of."""
    if runtime == "emulator":
        return list(LOADGEN_PINS)
    return [f"sglang[all]=={release}", *extra_pins]


def _validate(runtime: str, release: str, extra_pins: Sequence[str], venv_path: str | None) -> None:
    if runtime not in get_args(Runtime):
        raise SpecError(
            f"environment runtime {runtime!r} is not known; allowed: 'sglang' (real SGLang) or "
            "'emulator' (the project's stand-in). Set the host kind that selects it accordingly."
        )
    if not _RELEASE.match(release):
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


def emulator_digest(root: Path | None = None) -> str:
    """sha256 over the emulator packages' files (path and content) in ``root`` (this checkout),
    ignoring bytecode caches."""
    root = root or _ROOT
    digest = hashlib.sha256()
    for package in EMULATOR_PACKAGES:
        folder = root / package
        for file in sorted(p for p in folder.rglob("*") if p.is_file() and not _is_cache(p)):
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def _is_cache(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def _fingerprint(props: Mapping[str, Any], emulator: str | None) -> str:
    """What the marker file in a finished environment records: its runtime, release and pins."""
    recipe = {
        "runtime": props["runtime"],
        "release": props["release"],
        "pins": _effective_pins(props["runtime"], props["release"], props.get("extra_pins") or ()),
        "emulator": emulator,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _version_command(runtime: str, release: str) -> str:
    if runtime == "emulator":
        return f'SGLANG_EMULATOR_RELEASE={quote(release)} "$V/bin/python" -m sglang_emulator --version'
    return "\"$V/bin/python\" -c 'import sglang; print(sglang.__version__)'"


def _probe_script(venv: str, runtime: str, release: str) -> str:
    """Prints ``key=value`` lines: ``state=absent``, or the folder, marker and installed version."""
    return f"""{_ISOLATED}
V={quote_path(venv)}
if [ ! -x "$V/bin/python" ]; then echo state=absent; exit 0; fi
echo "venv=$(cd "$V" && pwd)"
echo "fingerprint=$(head -c 100 "$V/{_MARKER}" 2>/dev/null)"
if version=$({_version_command(runtime, release)} 2>&1); then
    echo "version=$(printf '%s\\n' "$version" | tail -n 1)"
else
    echo "version_error=$(printf '%s\\n' "$version" | tail -n 4 | tr '\\n' ' ')"
fi
"""


def _install_script(venv: str, props: Mapping[str, Any], fingerprint: str, staging: str | None) -> str:
    """Creates the venv when missing, installs the pins, swaps in uploaded packages, marks it done.

    Runs under a lock beside the folder, so two stacks installing one environment take turns.
    """
    pins = " ".join(
        quote(pin) for pin in _effective_pins(props["runtime"], props["release"], props["extra_pins"])
    )
    cleanup = swap = ""
    if staging is not None:
        packages = " ".join(f'"$SP"/{name}' for name in EMULATOR_PACKAGES)
        staged = " ".join(f'"$STAGE"/{name}' for name in EMULATOR_PACKAGES)
        cleanup = f"STAGE={quote_path(staging)}\ntrap 'rm -rf \"$STAGE\"' EXIT"
        swap = f"""
SP=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || exit {_EXIT_SITE}
rm -rf {packages}
mv {staged} "$SP"/ || exit {_EXIT_SITE}
"""
    return f"""{_ISOLATED}
set -u
V={quote_path(venv)}
{cleanup}
mkdir -p "$(dirname "$V")" || exit {_EXIT_VENV}
exec 9>"$V.lock"
if command -v flock >/dev/null 2>&1; then flock -w {LOCK_WAIT_S} 9 || exit {_EXIT_LOCK}; fi
if [ ! -x "$V/bin/python" ]; then
    python3 -m venv "$V" >&2 || exit {_EXIT_VENV}
fi
rm -f "$V/{_MARKER}"
"$V/bin/python" -m pip install --no-input --disable-pip-version-check {pins} >"$V/{_INSTALL_LOG}" 2>&1 \\
    || {{ tail -n 15 "$V/{_INSTALL_LOG}" >&2; exit {_EXIT_PIP}; }}
{swap}
printf '%s' {quote(fingerprint)} >"$V/{_MARKER}"
"""


def _parse_probe(stdout: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def _version_of(text: str) -> str:
    """The release in a version line: the last version-looking word (``sglang-emulator 0.5.8``)."""
    words = [word for word in text.split() if _RELEASE.match(word.lstrip("v"))]
    return words[-1].lstrip("v") if words else text.strip()


@plain_errors
class _PythonEnvironmentProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        outs = self._converge(props)
        return dynamic.CreateResult(outs["venv_path"], outs)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(self._converge(news))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        old_inputs = {**olds, "venv_path": olds.get("requested_venv_path", olds.get("venv_path"))}
        # Another runtime, release, pin set, folder or host is another environment.
        replaces = [
            key
            for key in ("runtime", "release", "extra_pins", "venv_path")
            if old_inputs.get(key) != news.get(key)
        ]
        changed, new_host = connection_diff(olds, news)
        if new_host:
            replaces.append("connection")
        # New emulator code is copied into the same environment in place.
        updates = [key for key in ("emulator_digest", "install_timeout_s") if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(
            changes=bool(replaces or updates or changed), replaces=replaces, delete_before_replace=False
        )

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        conn = connect(props)
        probe = self._probe(conn, props["venv_path"], props)
        # Gone or broken: refresh drops it, and the next up installs it again.
        if probe.get("state") == "absent" or "version" not in probe:
            return dynamic.ReadResult(None, {})
        return dynamic.ReadResult(id_, {**props, "sglang_version": _version_of(probe["version"])})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        # Left in place on purpose: every stack that asks for the same release and pins shares
        # this folder, and reinstalling SGLang takes many minutes.
        return None

    def _probe(self, conn: Connection, venv: str, props: Mapping[str, Any]) -> dict[str, str]:
        result = run(conn, _probe_script(venv, props["runtime"], props["release"]), timeout_s=PROBE_TIMEOUT_S)
        if not result.ok:
            raise HostError(
                f"Checking the Python environment {venv} on {conn.label} failed (exit {result.exit_code}): "
                f"{tail(result.stderr or result.stdout)}. Check that the host's shell works and run the "
                "update again."
            )
        return _parse_probe(result.stdout)

    def _converge(self, props: dict[str, Any]) -> dict[str, Any]:
        runtime, release = props["runtime"], props["release"]
        _validate(runtime, release, props["extra_pins"], props["venv_path"])
        conn = connect(props)
        requested = props["venv_path"]
        emulator = emulator_digest() if runtime == "emulator" else None
        fingerprint = _fingerprint(props, emulator)
        probe = self._probe(conn, requested, props)
        if probe.get("fingerprint") != fingerprint or "version" not in probe:
            self._install(conn, props, fingerprint)
            probe = self._probe(conn, requested, props)
        if "version" not in probe:
            what = "the emulator" if runtime == "emulator" else f"SGLang {release}"
            raise HostError(
                f"{what} was installed into {requested} on {conn.label}, but asking it for its version "
                f"failed: {probe.get('version_error') or probe}. Look at {requested}/{_INSTALL_LOG} on "
                "the host, fix the cause (a missing system library, a broken pin), and run the update again."
            )
        return {
            **props,
            "emulator_digest": emulator,
            "requested_venv_path": requested,
            "venv_path": probe["venv"],
            "python": f"{probe['venv']}/bin/python",
            "sglang_version": _version_of(probe["version"]),
            "launcher_module": LAUNCHER_MODULES[runtime],
        }

    def _install(self, conn: Connection, props: Mapping[str, Any], fingerprint: str) -> None:
        venv, runtime, release = props["venv_path"], props["runtime"], props["release"]
        staging = None
        if runtime == "emulator":
            staging = f"{venv}.upload-{secrets.token_hex(4)}"
            with tempfile.TemporaryDirectory(prefix="sglang-stacks-emulator-") as folder:
                for package in EMULATOR_PACKAGES:
                    shutil.copytree(
                        _ROOT / package,
                        Path(folder) / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                upload(conn, folder, staging, timeout_s=PROBE_TIMEOUT_S)
        script = _install_script(venv, props, fingerprint, staging)
        result = run(conn, script, timeout_s=float(props["install_timeout_s"]))
        if result.ok:
            return
        where = f"{venv} on {conn.label}"
        if result.exit_code == _EXIT_VENV:
            raise HostError(
                f"Creating the virtualenv {where} failed: {tail(result.stderr)}. Install Python 3 with "
                "its venv module on the host (Debian and Ubuntu: apt-get install python3-venv) and run the "
                "update again."
            )
        if result.exit_code == _EXIT_LOCK:
            raise HostError(
                f"Another update kept installing into {where} for {LOCK_WAIT_S} s. Wait for it to "
                "finish (or stop it), then run the update again."
            )
        if result.exit_code == _EXIT_PIP:
            pins = " ".join(_effective_pins(runtime, release, props["extra_pins"]))
            what = (
                f"the emulator's load-generator dependencies ({pins}) for release {release}"
                if runtime == "emulator"
                else f"SGLang {release} ({pins})"
            )
            raise HostError(
                f"Installing {what} into {where} failed; pip's last lines: {tail(result.stderr)}. "
                "Check that these versions exist for the host's Python and platform and that the host "
                "reaches the package index, fix environment.sglang_release or environment.extra_pins, "
                "and run the update again."
            )
        raise HostError(
            f"Preparing the Python environment {where} failed (exit {result.exit_code}): "
            f"{tail(result.stderr or result.stdout)}. Check that the user may write there and the disk "
            "has room, then run the update again."
        )


class PythonEnvironment(dynamic.Resource, module="sglang", name="PythonEnvironment"):
    """A virtualenv on the GPU host with the pinned SGLang release, or the project's emulator.

    ``runtime="sglang"`` installs ``sglang[all]==<release>`` and ``extra_pins`` with pip.
    ``runtime="emulator"`` copies ``sglang_flags`` and ``sglang_emulator`` from this checkout into
    the venv and installs the load generator's ``httpx``; ``extra_pins`` (GPU libraries) do not
    apply to it and are ignored. Deploying again when the environment is already right installs
    nothing: a marker in the venv records what was installed, and the version is asked again.

    Changing the runtime, release, pins, folder or host replaces the resource; changed emulator
    code is copied in place. Destroying it leaves the venv on the host, because every stack that
    asks for the same software shares it and reinstalling SGLang takes many minutes.
    """

    python: pulumi.Output[str]
    """Absolute path of the venv's python on the host."""
    sglang_version: pulumi.Output[str]
    """The SGLang release actually installed (emulated, on the emulator); selects the flag table."""
    launcher_module: pulumi.Output[str]
    """What ``python -m`` launches the server with: ``sglang.launch_server`` or ``sglang_emulator``."""
    venv_path: pulumi.Output[str]
    """The venv folder on the host, absolute once deployed."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        runtime: Runtime,
        release: str,
        extra_pins: Sequence[str] = (),
        venv_path: str | None = None,
        install_timeout_s: float = 3600.0,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``connection`` is the host's connection dict, passed as a Pulumi secret; ``venv_path``
        defaults to `default_venv_path`; ``install_timeout_s`` bounds one pip install on the host."""
        _validate(runtime, release, extra_pins, venv_path)
        props: dict[str, Any] = {
            "connection": connection,
            "runtime": runtime,
            "release": release,
            "extra_pins": list(extra_pins),
            "venv_path": venv_path or default_venv_path(runtime, release, extra_pins),
            "emulator_digest": emulator_digest() if runtime == "emulator" else None,
            "install_timeout_s": install_timeout_s,
            "launcher_module": LAUNCHER_MODULES[runtime],
            "python": None,
            "sglang_version": None,
        }
        super().__init__(_PythonEnvironmentProvider(), name, props, keep_connection_secret(opts))
