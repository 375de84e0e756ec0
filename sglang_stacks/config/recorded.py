"""Launch flags as earlier versions of the tool recorded them, read back into today's values: the
state, the stack outputs and the host's serving note once held them as rendered options
(``--flag`` -> its words) or only as the command line. Each becomes the `launch_values` map of the
typed flags, typed as the release's own parser reads it. Only upgrade code calls this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sglang_flags import Flag, FlagTable, load_table, parser
from sglang_stacks.config.flags import FlagValue, ServerFlags, field_name

__all__ = ["values_from_argv", "values_from_options"]


def _table_of(release: str) -> FlagTable | None:
    """The table of ``release``; a build without its own (``0.5.8+cu128``) reads its x.y.z's."""
    for name in (release, release.split("+", 1)[0]):
        try:
            return load_table(name)
        except KeyError:
            continue
    return None


def _option_flag(table: FlagTable, option: str) -> Flag | None:
    """The flag ``option`` means: its exact spelling, or an abbreviation of one, as argparse allows."""
    flag = table.by_option(option)
    if flag is None:
        matches = {f for f in table.flags for o in f.flags if o.startswith(option)}
        flag = matches.pop() if len(matches) == 1 else None
    return flag


def values_from_argv(argv: Sequence[str], release: str) -> dict[str, FlagValue]:
    """The `launch_values` map of the options in an argv (after the program's words), for launch
    flags that earlier versions of the tool recorded as rendered options or as the command line.
    With the release's table the values are typed as the release parses them; without one, each
    option keeps its words (a switch is ``True``)."""
    table = _table_of(release)
    if table is None:
        return _loose_values(argv)
    try:
        namespace = vars(parser(table.release).parse_known_args(list(argv))[0])
    except SystemExit:
        return _loose_values(argv)
    typed = set(ServerFlags.model_fields) - {"extra_flags"}
    values: dict[str, FlagValue] = {}
    for word in argv:
        if not word.startswith("--"):
            continue
        flag = _option_flag(table, word.split("=", 1)[0])
        if flag is None:
            continue
        value = namespace[flag.dest]
        name = field_name(flag.dest)
        key = name if name in typed else flag.dest
        if value is False and key in typed:
            continue
        values[key] = list(value) if isinstance(value, tuple) else value
    return values


def _loose_values(argv: Sequence[str]) -> dict[str, FlagValue]:
    """Options and their words, read without a flag table: a word that is no option is the
    previous option's value."""
    values: dict[str, FlagValue] = {}
    option: str | None = None
    for word in argv:
        if word.startswith("--"):
            option, _, inline = word.partition("=")
            values[field_name(option)] = inline if "=" in word else True
        elif option is not None:
            current = values[field_name(option)]
            values[field_name(option)] = word if current is True else f"{current} {word}"
    return values


def values_from_options(options: Mapping[str, object], release: str) -> dict[str, FlagValue]:
    """The `launch_values` map of flags recorded as rendered options (``--flag`` -> its words,
    ``True`` for a switch), as earlier versions of the tool recorded them in the state, the outputs
    and the host's notes."""
    argv: list[str] = []
    for option, value in options.items():
        if value is False:
            continue
        argv.append(str(option))
        if value is True:
            continue
        argv.extend(str(v) for v in value) if isinstance(value, list) else argv.append(str(value))
    return values_from_argv(argv, release)
