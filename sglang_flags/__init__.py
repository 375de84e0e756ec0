"""SGLang's launch-flag tables per release, and the argparse parser rebuilt from a table.

A table is the exact parser that ``ServerArgs.add_cli_args`` builds in one SGLang release
(see ``regenerate.py``). ``tables/index.json`` maps every shipped release to its table file
(releases with identical parsers share one) and holds each file's digest. Stdlib only: the
emulator installs this package on its host too.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "Flag",
    "FlagTable",
    "build_parser",
    "known_releases",
    "load_table",
    "nearest_releases",
    "parser",
    "release_key",
    "table_index",
]

_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


@dataclass(frozen=True)
class Flag:
    """One option of a release's parser: its spellings, destination and value rules."""

    flags: tuple[str, ...]
    dest: str
    type: str | None
    choices: tuple[Any, ...] | None
    default: Any
    nargs: int | str | None
    action: str

    @property
    def long_name(self) -> str:
        """The canonical spelling: the first long option the release declares."""
        return next(f for f in self.flags if f.startswith("--"))

    @property
    def deprecated(self) -> bool:
        """Whether the release marks the option deprecated (an alias kept for an old spelling)."""
        return self.action.startswith("Deprecated")

    @property
    def takes_value(self) -> bool:
        """Whether the option consumes a value on the command line."""
        return self.nargs != 0


@dataclass(frozen=True)
class FlagTable:
    """Every launch flag of one SGLang release."""

    release: str
    flags: tuple[Flag, ...]

    def by_dest(self, dest: str) -> Flag | None:
        """The option that stores into ``dest``; its own flag before any deprecated alias of it."""
        matches = [f for f in self.flags if f.dest == dest]
        return next((f for f in matches if not f.deprecated), matches[0] if matches else None)

    def by_option(self, option: str) -> Flag | None:
        """The option spelled exactly ``option`` (no prefix matching)."""
        return next((f for f in self.flags if option in f.flags), None)

    def option_strings(self) -> list[str]:
        """Every spelling of every option."""
        return [o for f in self.flags for o in f.flags]


def release_key(release: str) -> tuple[int, int, int, int]:
    """Sort key of a release: ``0.5.8`` < ``0.5.8.post1`` < ``0.5.9``; ValueError for other names."""
    found = _RELEASE.match(release)
    if found is None:
        raise ValueError(f"{release!r} is not an SGLang release number like 0.5.8 or 0.5.8.post1")
    major, minor, patch, post = found.groups()
    return int(major), int(minor), int(patch), int(post or 0)


@cache
def table_index() -> dict[str, Any]:
    """``tables/index.json``: ``releases`` (release -> table file), ``tables`` (file -> digest),
    ``refused`` (release -> why no table ships)."""
    text = resources.files(__package__).joinpath("tables", "index.json").read_text(encoding="utf-8")
    index: dict[str, Any] = json.loads(text)
    return index


def known_releases() -> list[str]:
    """Releases with a shipped table, oldest first."""
    return sorted(table_index()["releases"], key=release_key)


def nearest_releases(release: str) -> list[str]:
    """The shipped releases next to ``release``: the newest older one and the oldest newer one.

    For a name that is not a release number, the newest shipped release.
    """
    shipped = known_releases()
    try:
        key = release_key(release)
    except ValueError:
        return shipped[-1:]
    keys = [release_key(r) for r in shipped]
    at = bisect.bisect_left(keys, key)
    return [r for r in (shipped[at - 1] if at > 0 else None, shipped[at] if at < len(shipped) else None) if r]


@cache
def load_table(release: str) -> FlagTable:
    """The table of ``release``; ``KeyError`` naming the nearest shipped releases when there is none."""
    file_name = table_index()["releases"].get(release)
    if file_name is None:
        near = " or ".join(nearest_releases(release))
        raise KeyError(f"no flag table ships for SGLang {release}; the nearest releases with one: {near}")
    raw = json.loads(resources.files(__package__).joinpath("tables", file_name).read_text(encoding="utf-8"))
    flags = tuple(
        Flag(
            flags=tuple(f["flags"]),
            dest=f["dest"],
            type=f["type"],
            choices=tuple(f["choices"]) if f["choices"] is not None else None,
            default=f["default"],
            nargs=f["nargs"],
            action=f["action"],
        )
        for f in raw["flags"]
    )
    return FlagTable(release=release, flags=flags)


def _value_type(flag: Flag) -> Any:
    # Converters SGLang defines itself are kept as strings: the table records their names, not code.
    return {"int": int, "float": float}.get(flag.type or "", str)


def build_parser(release: str, prog: str = "launch_server.py") -> argparse.ArgumentParser:
    """An argparse parser that accepts and rejects exactly what the release's parser does.

    Prefix matching (``allow_abbrev``) is argparse's default, as in SGLang, so an abbreviation
    that matches two options fails as ambiguous there and here alike.
    """
    parser = argparse.ArgumentParser(prog=prog)
    for flag in load_table(release).flags:
        if flag.action == "_HelpAction":
            continue
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": flag.default}
        if flag.action in ("_StoreTrueAction", "DeprecatedStoreTrueAction", "DeprecatedAction"):
            kwargs["action"] = "store_true"
        elif flag.action == "DeprecatedStoreConstAction":
            kwargs.update(action="store_const", const=flag.choices[0] if flag.choices else True)
        elif flag.action == "BooleanOptionalAction":
            parser.add_argument(flag.flags[0], action=argparse.BooleanOptionalAction, **kwargs)
            continue
        else:
            kwargs["type"] = _value_type(flag)
            if flag.nargs is not None:
                kwargs["nargs"] = flag.nargs
            if flag.choices is not None:
                kwargs["choices"] = list(flag.choices)
        parser.add_argument(*flag.flags, **kwargs)
    return parser


@cache
def parser(release: str) -> argparse.ArgumentParser:
    """The release's parser, built once per process and shared: parsing an argv does not change it,
    and building one (some 330 options) costs more than the rest of judging a launch. Callers parse
    with it and never add to it; ``build_parser`` gives a parser of one's own."""
    return build_parser(release)
