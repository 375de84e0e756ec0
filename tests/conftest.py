"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._pulumi import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """A throwaway project folder and local backend for driving the real Pulumi CLI."""
    return Workspace.create(tmp_path)
