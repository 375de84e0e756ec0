"""The contract of ``env_install.sh``: a Python environment made to hold what a stack pins (the
venv created when missing, the pins installed, uploaded packages swapped in, the marker written
last), under a lock beside the folder so two stacks installing one environment take turns."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from sglang_stacks.errors import HostError, StacksError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs.contract import ON_HOST, Program, ProgramExit, Request
from sglang_stacks.hostops.programs.env_check_contract import Runtime
from sglang_stacks.hostops.transport import CommandResult, tail

__all__ = ["ENV_INSTALL", "EnvInstallExit", "Install"]


class EnvInstallExit(ProgramExit):
    """How ``env_install.sh`` ends."""

    OK = 0
    """The environment holds the pins and its marker is written."""
    NO_ROOT = 2, HostError
    """It could not enter ``/``, where it runs from."""
    NO_VENV = 10, HostError
    """The venv could not be created: the host's python3 lacks its venv module."""
    PIP_FAILED = 11, HostError
    """pip could not install the pins (its last lines on stderr)."""
    LOCK_TAKEN = 12, HostError
    """Another install into the same folder kept its lock for the whole wait."""
    PACKAGES_REFUSED = 13, HostError
    """The environment's site-packages could not be found, or would not take the uploaded
    packages (permissions, a full disk)."""


ENV_INSTALL = Program(file="env_install.sh", exits=EnvInstallExit, error=HostError)
"""``env_install.sh``."""


class Install(Request[None]):
    """Makes ``venv`` hold ``pins`` and the packages uploaded to ``staging``, then writes its
    marker with ``fingerprint``; the upload is removed whatever happens."""

    program: ClassVar[Program] = ENV_INSTALL

    venv: Annotated[str, ON_HOST]
    pins: tuple[str, ...]
    """pip requirements."""
    staging: Annotated[str, ON_HOST] = ""
    """A folder of uploaded packages to put into site-packages, or empty."""
    packages: tuple[str, ...] = ()
    """The package folders in ``staging``."""
    marker: str
    fingerprint: str
    """What the marker records."""
    seen: str = ""
    """What the caller read in the marker before asking (empty: no marker). When another install
    wrote ``fingerprint`` there while this one waited for the lock, this one does nothing."""
    install_log: str
    """pip's log file's name in the folder."""
    lock_wait_s: int
    without_pip: bool = False
    """A venv it creates gets no pip of its own when the host's python3 has pip 22.3 or later, whose
    ``--python`` then installs into it: ``python3 -m venv`` spends about 4 CPU-seconds putting pip
    and setuptools in (ensurepip), for each emulated host's venv. Without such a pip, or in a venv
    that has its own, the venv's pip installs, as always."""
    wheels: Annotated[str, ON_HOST] = ""
    """A folder of the host's that keeps the pins' wheels, or empty. The pins are installed from it
    without the package index, which pip spent most of its 4.4 CPU-seconds reading (1.0 from local
    wheels, measured here), and it is filled from the index when it lacks one."""
    runtime: Runtime = Field(exclude=True)
    """For the messages: what is installed."""
    release: str = Field(exclude=True)
    """For the messages: the release installed (emulated)."""

    def answer(self, conn: Connection, result: CommandResult) -> None:
        return None

    def failure(self, conn: Connection, code: ProgramExit, result: CommandResult) -> StacksError:
        where = f"{self.venv} on {conn.label}"
        if code is EnvInstallExit.NO_VENV:
            return HostError(
                f"Creating the virtualenv {where} failed: {tail(result.stderr)}. Install Python 3 with "
                "its venv module on the host (Debian and Ubuntu: apt-get install python3-venv) and run "
                "the update again."
            )
        if code is EnvInstallExit.LOCK_TAKEN:
            return HostError(
                f"Another update kept installing into {where} for {self.lock_wait_s} s. Wait for it to "
                "finish (or stop it), then run the update again."
            )
        if code is EnvInstallExit.PIP_FAILED:
            what = (
                f"the emulator's load-generator dependencies ({' '.join(self.pins)}) for release "
                f"{self.release}"
                if self.runtime == "emulator"
                else f"SGLang {self.release} ({' '.join(self.pins)})"
            )
            return HostError(
                f"Installing {what} into {where} failed; pip's last lines: {tail(result.stderr)}. "
                "Check that these versions exist for the host's Python and platform and that the host "
                "reaches the package index, fix environment.sglang_release or environment.extra_pins, "
                "and run the update again."
            )
        if code is EnvInstallExit.PACKAGES_REFUSED:
            return HostError(
                f"Putting the uploaded packages into the site-packages of {where} failed: "
                f"{tail(result.stderr or result.stdout)}. Check that the user may write there and the "
                "disk has room, then run the update again."
            )
        return HostError(
            f"Preparing the Python environment {where} failed (exit {int(code)}): "
            f"{tail(result.stderr or result.stdout)}. Check that the user may write there and the disk "
            "has room, then run the update again."
        )
