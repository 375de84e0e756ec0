"""The images the cluster's pods run, built here (no registry is reachable) and imported into the
node's containerd: the emulator's image, which also holds the load generator and SGLang's router.

It is Debian's minimal system with python3 (the base scripts/ensure-k8s.sh made with debootstrap)
plus one layer with the project's own code, as a host's emulator environment has it: the emulator
packages (``EMULATOR_PACKAGES``), the load generator as its ``loadgen`` package, the load
generator's pinned dependencies (``LOADGEN_PINS``) and sglang-router (``router_pins``: the release
fleets pin and what it needs, at the versions this checkout's environment runs), installed by pip
for the image's python. The tag is a digest of all of that, and a built image is kept in the cache
under its tag: an unchanged checkout builds nothing.

    python3 -m sglang_emulator --model-path ... --port 30000   # the server (image's working folder)
    python3 -m loadgen ...                                      # the load generator
    python3 -m sglang_router.launch_router --port 30100         # a fleet's router
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import sglang_loadgen as loadgen
from sglang_stacks.config.fleet import ROUTER_RELEASE
from sglang_stacks.hostops.environment import EMULATOR_PACKAGES, LOADGEN_PINS, emulator_digest
from toolchain.local_cluster.errors import ClusterError
from toolchain.local_cluster.programs import ROOT, Programs

EMULATOR_IMAGE = "sglang-stacks.local/emulator"
LOCAL_TAG = "local"
"""The emulator image's second tag in a cluster: always the image the cluster imported last."""
APP = "/opt/sglang-stacks"
"""Where the project's code is in the image (its working folder, on PYTHONPATH)."""
SITE = f"{APP}/site-packages"
KEPT = 3
"""Built images kept in the cache (each about 75 MB): a few checkouts' worth."""
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian bookworm's python3 and C library (glibc 2.36): the wheels that fit it, as pip would
# choose them on that system.
_PYTHON = "3.11"
_PLATFORMS = [f"--platform=manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)]


@dataclass(frozen=True)
class Image:
    """An image tarball (OCI layout) whose one image is tagged ``tag``."""

    name: str
    tag: str
    tarball: Path

    @property
    def ref(self) -> str:
        """``name:tag``, what a pod's ``image`` names."""
        return f"{self.name}:{self.tag}"


def router_pins() -> list[str]:
    """sglang-router at the release fleets pin and every package it needs (its requirements, theirs,
    ...), each at the version installed here: the image's router is the one the project runs."""
    from packaging.requirements import Requirement

    pins: dict[str, str] = {}
    pending = ["sglang-router"]
    while pending:
        try:
            found = importlib.metadata.distribution(pending.pop())
        except importlib.metadata.PackageNotFoundError as missing:
            raise ClusterError(
                f"Building the emulator image: {missing.name} is not installed; run scripts/bootstrap.sh."
            ) from None
        name = re.sub(r"[-_.]+", "-", found.metadata["Name"]).lower()
        if name in pins:
            continue
        pins[name] = found.version
        for text in found.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    if pins["sglang-router"] != ROUTER_RELEASE:
        raise ClusterError(
            f"Building the emulator image: sglang-router {pins['sglang-router']} is installed here, but "
            f"fleets run {ROUTER_RELEASE}; run scripts/bootstrap.sh."
        )
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def cache_folder() -> Path:
    """Where built images are kept (``$SGLANG_STACKS_CACHE/images``)."""
    base = os.environ.get("SGLANG_STACKS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang-stacks"
    )
    return Path(base) / "images"


def emulator_image(programs: Programs) -> Image:
    """The emulator's image for this checkout, built unless the cache has it. The cache keeps the
    ``KEPT`` images used last."""
    digest = hashlib.sha256()
    digest.update(emulator_digest().encode())
    for source in sorted(Path(loadgen.__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + hashlib.sha256(source.read_bytes()).digest())
    pins = [*LOADGEN_PINS, *router_pins()]
    digest.update("\n".join(pins).encode())
    digest.update((programs.debian_python / "index.json").read_bytes())
    tag = digest.hexdigest()[:16]
    image = Image(EMULATOR_IMAGE, tag, cache_folder() / f"emulator-{tag}.tar")
    if image.tarball.exists():
        image.tarball.touch()
    else:
        _build(programs, image, pins)
    _prune(image.tarball.parent)
    return image


def _prune(folder: Path) -> None:
    """Remove all but the ``KEPT`` images used last (a tarball is touched when used)."""
    tarballs = sorted(folder.glob("emulator-*.tar"), key=lambda path: path.stat().st_mtime, reverse=True)
    for old in tarballs[KEPT:]:
        old.unlink(missing_ok=True)


def _build(programs: Programs, image: Image, pins: list[str]) -> None:
    image.tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="emulator-image-", dir=image.tarball.parent) as work:
        app, layout = Path(work) / "app", Path(work) / "layout"
        for package in EMULATOR_PACKAGES:
            shutil.copytree(
                ROOT / package, app / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        with tarfile.open(fileobj=io.BytesIO(loadgen.bundle())) as bundle:
            bundle.extractall(app, filter="data")
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",
                f"--target={app / 'site-packages'}",
                "--only-binary=:all:",
                f"--python-version={_PYTHON}",
                "--implementation=cp",
                *_PLATFORMS,
                *sorted(set(pins)),
            ]
        )
        # The base's blobs are never written (content-addressed): linked, not copied.
        shutil.copytree(programs.debian_python, layout, copy_function=os.link)
        for name in ("index.json", "oci-layout"):
            (layout / name).unlink()
            shutil.copy(programs.debian_python / name, layout / name)
        umoci = str(programs.umoci)
        _run([umoci, "insert", "--image", f"{layout}:base", str(app), APP])
        _run(
            [
                umoci,
                "config",
                "--image",
                f"{layout}:base",
                "--tag",
                image.tag,
                f"--config.env=PATH={_PATH}",
                f"--config.env=PYTHONPATH={APP}:{SITE}",
                "--config.env=PYTHONUNBUFFERED=1",
                f"--config.workingdir={APP}",
                "--config.cmd=python3",
            ]
        )
        _run([umoci, "rm", "--image", f"{layout}:base"])
        _run([umoci, "gc", "--layout", str(layout)])
        partial = Path(work) / "image.tar"
        _run(["tar", "-C", str(layout), "-cf", str(partial), "."])
        partial.rename(image.tarball)


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(
            f"Building the emulator image: {' '.join(argv[:3])} failed: {result.stderr.strip()}"
        )


def image_config(tarball: Path) -> dict[str, object]:
    """The image's configuration (environment, working folder, command), read from the tarball."""
    with tarfile.open(tarball) as archive:
        index = json.load(archive.extractfile("./index.json"))  # type: ignore[arg-type]
        manifest = json.load(archive.extractfile(_blob(index["manifests"][0]["digest"])))  # type: ignore[arg-type]
        config: dict[str, object] = json.load(archive.extractfile(_blob(manifest["config"]["digest"])))  # type: ignore[arg-type]
    return config


def _blob(digest: str) -> str:
    algorithm, value = digest.split(":")
    return f"./blobs/{algorithm}/{value}"
