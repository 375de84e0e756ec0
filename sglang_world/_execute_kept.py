"""The answers of a release's code kept on disk by their question (``execute``): a stack judged once
is judged again without a child interpreter."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ADDRESSES", "ANSWERS_FORMAT", "keep", "kept", "name"]

ANSWERS_FORMAT = 24
"""Bumped when what a child answers changes, so older kept answers are not read."""
ADDRESSES = frozenset({"--host", "--port", "--disaggregation-bootstrap-port", "--dist-init-addr"})
"""Where a server listens and meets its peers: no release resolves memory or scheduling from them
(asked of 0.5.9 to 0.5.23 with other values, every answer was the same), and a test or a fleet gives
each server free ports, so one kept answer serves every address."""


def name(release: str, asked: dict[str, Any]) -> str:
    """The kept answer's name for a question (``Question.as_dict``), where the server listens left
    out (``ADDRESSES``)."""
    argv = list(asked["argv"])
    for index, flag in enumerate(argv[:-1]):
        if flag in ADDRESSES:
            argv[index + 1] = ""
    text = json.dumps([ANSWERS_FORMAT, release, {**asked, "argv": argv}], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def kept(cache: Path, key: str) -> dict[str, Any] | None:
    try:
        return json.loads((cache / f"{key}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def keep(cache: Path, key: str, raw: dict[str, Any]) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=cache, delete=False, suffix=".partial") as handle:
        json.dump(raw, handle)
    os.replace(handle.name, cache / f"{key}.json")
