"""Stacks deployed by earlier versions pickled their providers by reference to the top-level
``components`` modules: those names must still load today's providers."""

from __future__ import annotations

import pickle

import pytest

from sglang_stacks.components.draft_model import DraftModelProvider
from sglang_stacks.components.environment import PythonEnvironmentProvider
from sglang_stacks.components.host import ClaimProvider, ProbeProvider


@pytest.mark.parametrize(
    ("module", "name", "provider"),
    [
        ("components.host", "_ClaimProvider", ClaimProvider),
        ("components.host", "_ProbeProvider", ProbeProvider),
        ("components.environment", "_PythonEnvironmentProvider", PythonEnvironmentProvider),
        ("components.draft_model", "_DraftModelProvider", DraftModelProvider),
    ],
)
def test_a_provider_pickled_under_its_old_name_loads_todays_provider(
    module: str, name: str, provider: type
) -> None:
    # What Pulumi's dill wrote for an instance of a class found by reference: module and name.
    old = b"\x80\x04c" + f"{module}\n{name}\n".encode() + pickle.EMPTY_TUPLE + pickle.NEWOBJ + pickle.STOP
    assert type(pickle.loads(old)) is provider
