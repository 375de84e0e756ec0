"""The stack outputs that results read: the launch flags, parsed with the flag table of the stack's
SGLang release so aliases and prefixes read canonically, and the benchmark result.

Outputs arrive as ``pulumi stack output --json`` prints them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, model_validator

from sglang_flags import FlagTable, known_releases, load_table
from sglang_stacks.results.stats import BenchmarkResult

__all__ = ["FlagValue", "StackOutputs", "parse_argv"]

FlagValue = str | bool | None
"""A flag's value: its text, ``True`` for a switch that is present, ``None`` when absent."""


class StackOutputs(BaseModel):
    """The stack outputs a comparison reads; any others are ignored.

    The launch flags come from ``launch_argv`` (a list), else ``launch_flags`` (``--flag`` ->
    value, ``True`` for a switch, a list for several values), else ``launch_command`` (one string).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    launch_argv: tuple[str, ...] | None = None
    launch_flags: dict[str, str | int | float | bool | list[str | int | float]] | None = None
    launch_command: str | None = None
    sglang_version: str
    benchmark: BenchmarkResult

    @model_validator(mode="after")
    def _has_flags(self) -> StackOutputs:
        if self.launch_argv is None and self.launch_flags is None and self.launch_command is None:
            raise ValueError("none of the outputs launch_argv, launch_flags or launch_command is set")
        return self

    def argv(self) -> list[str]:
        """The launch command as argv, from whichever output the stack has."""
        if self.launch_argv is not None:
            return list(self.launch_argv)
        if self.launch_flags is not None and not any(key.startswith("-") for key in self.launch_flags):
            # Typed launch values by canonical name: rendered for the release by the one renderer.
            from sglang_stacks.config.render import flags_from_values, render_argv

            return render_argv(flags_from_values(self.launch_flags), self.sglang_version)
        if self.launch_flags is not None:
            argv: list[str] = []
            for option, value in self.launch_flags.items():
                if value is False:
                    continue
                argv.append(option)
                if value is not True:
                    argv.extend(str(v) for v in (value if isinstance(value, list) else [value]))
            return argv
        return shlex.split(self.launch_command or "")


def _table_for(release: str | None) -> FlagTable | None:
    """The flag table of ``release``; a build without its own table (``0.5.8+cu128``) reads its x.y.z's."""
    if release in known_releases():
        return load_table(release)
    found = re.match(r"\d+\.\d+\.\d+", release or "")
    if found is None or found.group() not in known_releases():
        return None
    return load_table(found.group())


def _resolve(option: str, table: FlagTable | None) -> tuple[str, bool | None, bool]:
    """Canonical spelling of ``option``, whether it takes a value (None: unknown), and if it takes many."""
    if table is None:
        return option, None, False
    flag = table.by_option(option)
    if flag is None:
        # argparse accepts an unambiguous prefix; resolve it the same way.
        matches = {f for f in table.flags for o in f.flags if o.startswith(option)}
        flag = matches.pop() if len(matches) == 1 else None
    if flag is None:
        return option, None, False
    return flag.long_name, flag.takes_value, flag.nargs in ("+", "*") or isinstance(flag.nargs, int)


def parse_argv(argv: Sequence[str], release: str | None = None) -> dict[str, FlagValue]:
    """Launch flags of an argv as ``{"--flag": value}``; switches map to ``True``.

    Everything before the first ``--`` option is the program (``python -m sglang.launch_server``).
    With a known ``release`` the flag table decides which options take values and spells aliases
    and prefixes canonically; otherwise a token that is not an option is the previous one's value.
    """
    table = _table_for(release)
    flags: dict[str, FlagValue] = {}
    index = next((i for i, token in enumerate(argv) if token.startswith("--")), len(argv))
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--"):
            continue  # a stray value; argparse would reject it, the comparison just skips it
        option, _, inline = token.partition("=")
        name, takes_value, many = _resolve(option, table)
        if inline or "=" in token:
            flags[name] = inline
            continue
        values: list[str] = []
        while index < len(argv) and not argv[index].startswith("--") and takes_value is not False:
            values.append(argv[index])
            index += 1
            if not many and takes_value is True:
                break
        flags[name] = " ".join(values) if values else True
    return flags
