"""The project's own stack files (``stacks/``), as the tests read them."""

from __future__ import annotations

from pathlib import Path

from sglang_stacks.project import stacks_dir

STACKS_DIR = stacks_dir(Path(__file__).resolve().parent.parent)
"""The project's ``stackConfigDir``."""
