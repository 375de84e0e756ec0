"""Tables built from the release wheels equal the parsers of fully installed releases."""

import json
from pathlib import Path

import pytest

from sglang_flags import load_table
from sglang_flags.build import Built, build_from_wheel
from sglang_flags.regenerate import main
from sglang_flags.wheels import default_cache

INSTALLED = Path(__file__).resolve().parent / "fixtures" / "installed-parsers"

# Choices a release declares as a set: argparse lists them in the hash order of the process that
# built the parser, so only their members are compared.
UNORDERED_CHOICES = {"sampling_backend"}


@pytest.fixture(scope="module")
def built() -> dict[str, Built]:
    """0.5.8 and 0.5.23 built from their wheels (cached; downloaded with pip when missing)."""
    return {release: build_from_wheel(release, default_cache()) for release in ("0.5.8", "0.5.23")}


@pytest.mark.parametrize("release", ["0.5.8", "0.5.23"])
def test_tables_built_from_wheels_equal_the_installed_parsers_field_by_field(built, release):
    assert built[release].refused == []
    ours = built[release].flags
    theirs = json.loads((INSTALLED / f"{release}.json").read_text())["flags"]
    assert [f["dest"] for f in ours] == [f["dest"] for f in theirs]
    for mine, real in zip(ours, theirs, strict=True):
        for field in ("flags", "dest", "type", "default", "nargs", "action", "choices"):
            if field == "choices" and mine["dest"] in UNORDERED_CHOICES:
                assert sorted(mine["choices"]) == sorted(real["choices"]), mine["dest"]
            else:
                assert mine[field] == real[field], (mine["dest"], field)


@pytest.mark.parametrize("release", ["0.5.8", "0.5.23"])
def test_the_shipped_table_is_the_one_built_from_the_wheel(built, release):
    shipped = load_table(release)
    assert [f.dest for f in shipped.flags] == [f["dest"] for f in built[release].flags]
    assert [list(f.choices or ()) for f in shipped.flags] == [
        f["choices"] or [] for f in built[release].flags
    ]


def test_output_prints_one_table_and_writes_nothing(built, capsys, tmp_path):
    assert main(["0.5.8", "--output", "-", "--tables", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["sglang_version"] == "0.5.8" and printed["flags"] == built["0.5.8"].flags
    assert list(tmp_path.iterdir()) == []


def test_a_release_pip_does_not_have_is_an_error_that_says_so(capsys, tmp_path):
    assert main(["0.5.0.post99", "--cache", str(tmp_path)]) == 2
    assert "pip could not download a wheel of sglang==0.5.0.post99" in capsys.readouterr().err
