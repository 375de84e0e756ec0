"""The Python environment on a host: what a venv holds (checked by ``env_check.sh``) and making it
hold the pinned SGLang release or this checkout's emulator (``env_install.sh``).

A marker file in a finished venv records a fingerprint of what was installed; a venv whose marker
matches and that answers its version is ready, and is not installed again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import secrets
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglang_stacks.errors import HostError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.env_check_contract import CheckEnvironment, EnvironmentReport, Runtime
from sglang_stacks.hostops.programs.env_install_contract import Install
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.transport import upload

__all__ = [
    "EMULATOR_PACKAGES",
    "LOADGEN_PINS",
    "Installed",
    "converge",
    "effective_pins",
    "emulator_digest",
    "is_release",
    "read",
]

EMULATOR_PACKAGES = ("sglang_flags", "sglang_world", "sglang_emulator")
"""The stdlib-only packages copied from this checkout into an emulator environment."""

LOADGEN_PINS = ("aiohttp==3.14.5", "uvloop==0.23.0")
"""What the benchmark's load generator needs next to the emulator; it runs with the env's python."""

EMULATOR_WHEELS = "~/.cache/sglang-stacks/emulator-wheels"
"""Where a machine keeps the wheels of ``LOADGEN_PINS`` for the emulated hosts' venvs, one each."""

CHECK_TIMEOUT_S = 120.0
# Waiting for another update that installs into the same folder; an install can take this long.
LOCK_WAIT_S = 3600
MARKER = ".sglang-stacks-env"
INSTALL_LOG = ".sglang-stacks-install.log"
# The folder that holds the emulator packages: the checkout, or site-packages when installed.
_ROOT = Path(str(importlib.util.find_spec("sglang_emulator").origin)).resolve().parent.parent  # type: ignore[union-attr]
_RELEASE = re.compile(r"^[0-9]+(\.[0-9]+)*([.+!_-]?[A-Za-z0-9]+)*$")


@dataclass(frozen=True)
class Installed:
    """A ready environment on the host."""

    venv_path: str
    """The venv folder, absolute."""
    version: str
    """The SGLang release it holds (emulates, for the emulator)."""


def is_release(text: str) -> bool:
    """Whether ``text`` is written as a version (``0.5.8``, ``0.5.3rc0``)."""
    return bool(_RELEASE.match(text))


def effective_pins(runtime: str, release: str, extra_pins: Sequence[str]) -> list[str]:
    """The pip requirements the environment is made of (GPU pins do not apply to the emulator)."""
    if runtime == "emulator":
        return list(LOADGEN_PINS)
    return [f"sglang[all]=={release}", *extra_pins]


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


def _fingerprint(runtime: str, release: str, extra_pins: Sequence[str], emulator: str | None) -> str:
    """What the marker in a finished environment records: its runtime, release and pins."""
    pins = effective_pins(runtime, release, extra_pins)
    recipe = {"runtime": runtime, "release": release, "pins": pins, "emulator": emulator}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _version_of(text: str) -> str:
    """The release in a version line: the last version-looking word (``sglang-emulator 0.5.8``)."""
    words = [word for word in text.split() if _RELEASE.match(word.lstrip("v"))]
    return words[-1].lstrip("v") if words else text.strip()


def _check(
    conn: Connection, venv: str, runtime: Runtime, release: str, *, prove_import: bool = False
) -> EnvironmentReport:
    """What ``env_check.sh`` reports. SGLang's version comes from its metadata, with its declared
    requirements checked; ``prove_import`` also imports it, which takes most of a second."""
    return call(
        conn,
        CheckEnvironment(
            venv=venv, runtime=runtime, release=release, marker=MARKER, prove_import=prove_import
        ),
    )


def read(conn: Connection, venv: str, runtime: Runtime, release: str) -> Installed | None:
    """The environment at ``venv`` if it is there and holds SGLang with its requirements (read from
    their metadata, without importing SGLang), else None."""
    found = _check(conn, venv, runtime, release)
    if found.absent or found.version is None:
        return None
    return Installed(found.venv, _version_of(found.version))


def converge(
    conn: Connection,
    venv: str,
    *,
    runtime: Runtime,
    release: str,
    extra_pins: Sequence[str],
    install_timeout_s: float,
) -> Installed:
    """Makes ``venv`` hold what is asked for, installing only when its marker says otherwise."""
    emulator = emulator_digest() if runtime == "emulator" else None
    fingerprint = _fingerprint(runtime, release, extra_pins, emulator)
    # Making it is not a refresh: an installed SGLang must import, whatever the import costs.
    found = _check(conn, venv, runtime, release, prove_import=True)
    if found.fingerprint != fingerprint or found.version is None:
        _install(
            conn, venv, runtime, release, extra_pins, (found.fingerprint, fingerprint), install_timeout_s
        )
        found = _check(conn, venv, runtime, release, prove_import=True)
    if found.version is None:
        what = "the emulator" if runtime == "emulator" else f"SGLang {release}"
        raise HostError(
            f"{what} was installed into {venv} on {conn.label}, but asking it for its version "
            f"failed: {found.version_error or 'no answer'}. Look at {venv}/{INSTALL_LOG} on "
            "the host, fix the cause (a missing system library, a broken pin), and run the update again."
        )
    return Installed(found.venv, _version_of(found.version))


def _upload_emulator(conn: Connection, venv: str) -> str:
    """Copies this checkout's emulator packages next to ``venv``; returns the staging folder."""
    staging = f"{venv}.upload-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="sglang-stacks-emulator-") as folder:
        for package in EMULATOR_PACKAGES:
            shutil.copytree(
                _ROOT / package, Path(folder) / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        upload(conn, folder, staging, timeout_s=CHECK_TIMEOUT_S)
    return staging


def _install(
    conn: Connection,
    venv: str,
    runtime: Runtime,
    release: str,
    extra_pins: Sequence[str],
    fingerprints: tuple[str, str],
    timeout_s: float,
) -> None:
    """Installs under the environment's lock; ``fingerprints`` are the marker read before and the
    one to write."""
    seen, fingerprint = fingerprints
    staging = _upload_emulator(conn, venv) if runtime == "emulator" else ""
    install = Install(
        venv=venv,
        pins=tuple(effective_pins(runtime, release, extra_pins)),
        staging=staging,
        packages=EMULATOR_PACKAGES,
        marker=MARKER,
        fingerprint=fingerprint,
        seen=seen,
        install_log=INSTALL_LOG,
        lock_wait_s=LOCK_WAIT_S,
        without_pip=runtime == "emulator",  # the tool's own environment, one per emulated host
        wheels=EMULATOR_WHEELS if runtime == "emulator" else "",
        runtime=runtime,
        release=release,
        limit_s=timeout_s,
    )
    call(conn, install)
