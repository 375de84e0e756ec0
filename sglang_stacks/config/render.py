"""The one place launch flags become a release's argv, and how a person reads them.

``canonical_flags`` names every flag of a stack the way the release's table does, so the same
configuration is the same value whatever spelling the stack file used; ``render_argv`` turns typed
flags into the argv a release accepts, with that release's spellings (the server's launch calls it,
once); ``shown_flags`` is how a preview, ``compare`` and ``render`` show the flags: each by the
option the release spells, with its typed value.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Mapping

from sglang_flags import Flag, FlagTable, load_table, nearest_releases
from sglang_flags.renames import flag_for
from sglang_stacks.config.findings import Finding, error
from sglang_stacks.config.flags import _SWITCH_ACTIONS, FlagValue, ServerFlags, launch_values
from sglang_stacks.config.names import is_env_name
from sglang_stacks.errors import FlagError

UNRENDERABLE = "flag-unrenderable"
"""The code of the finding that a flag cannot be rendered for a release."""


class _Unrenderable(Exception):
    """A flag problem on its way to a `Finding` or a FlagError."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(f"{message} {fix}")
        self.message = message
        self.fix = fix


def _table(release: str) -> FlagTable:
    try:
        return load_table(release)
    except KeyError:
        raise _Unrenderable(
            f"There is no flag table for SGLang {release!r}.",
            f"Use the nearest release with one ({' or '.join(nearest_releases(release))}), or add a "
            f"table with python -m sglang_flags.regenerate {release}.",
        ) from None


def _nearest(key: str, table: FlagTable) -> list[str]:
    names = [f.dest for f in table.flags] + table.option_strings()
    return difflib.get_close_matches(key, names, n=3, cutoff=0.6)


def _resolve(key: str, release: str) -> Flag:
    table = _table(release)
    flag = table.by_option(key) if key.startswith("-") else flag_for(table, key)
    if flag is not None:
        return flag
    near = _nearest(key, table)
    hint = f" The nearest names are {', '.join(near)}." if near else ""
    raise _Unrenderable(
        f"SGLang {release} has no launch flag {key!r}.{hint}",
        "Use a flag from that release's table, or remove it.",
    )


def resolve_flag(key: str, release: str) -> Flag:
    """The release's flag for ``key`` (a field name, dest or exact long option), renames applied.

    Raises FlagError naming the nearest real names when the release has no such flag.
    """
    try:
        return _resolve(key, release)
    except _Unrenderable as problem:
        raise FlagError(str(problem)) from None


def _render_value(key: str, value: object, flag: Flag, release: str) -> list[str]:
    """The argv words for one flag; raises _Unrenderable when the value does not suit the flag."""
    option = flag.long_name
    where = f"{key}={value!r}: {option} on SGLang {release}"
    if flag.action == "BooleanOptionalAction":
        if not isinstance(value, bool):
            raise _Unrenderable(f"{where} is a switch.", "Set true or false.")
        negative = next((f for f in flag.flags if f.startswith("--no-")), None)
        if value:
            return [option]
        return [negative] if negative else []
    if flag.action in _SWITCH_ACTIONS or flag.nargs == 0:
        if not isinstance(value, bool):
            raise _Unrenderable(
                f"{where} is a switch and takes no value.", "Set true to pass it or false to leave it out."
            )
        return [option] if value else []
    if isinstance(value, bool):
        raise _Unrenderable(f"{where} takes a value, not true/false.", "Give the value itself.")
    if isinstance(value, list) and flag.nargs not in ("+", "*"):
        raise _Unrenderable(f"{where} takes one value, not a list.", "Give a single value.")
    values = value if isinstance(value, list) else [value]
    if not values and flag.nargs == "+":
        raise _Unrenderable(f"{where} needs at least one value.", "Give one or more values.")
    words = [_render_scalar(where, v, flag) for v in values]
    if len(words) == 1 and words[0].startswith("-"):
        # A value that looks like an option must be attached, or argparse reads it as one.
        return [f"{option}={words[0]}"]
    return [option, *words]


def _render_scalar(where: str, value: object, flag: Flag) -> str:
    if flag.type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
        raise _Unrenderable(f"{where} takes an integer.", "Give a whole number.")
    if flag.type == "float" and (not isinstance(value, int | float) or isinstance(value, bool)):
        raise _Unrenderable(f"{where} takes a number.", "Give a number.")
    word = str(value)
    if flag.choices is not None and word not in {str(c) for c in flag.choices}:
        allowed = ", ".join(str(c) for c in flag.choices)
        raise _Unrenderable(
            f"{where} accepts only: {allowed}.", "Pick one of those, or target a release that has this value."
        )
    return word


def _collect(flags: ServerFlags, release: str) -> tuple[list[str], list[Finding]]:
    argv: list[str] = []
    problems: list[Finding] = []
    try:
        _table(release)
    except _Unrenderable as problem:
        return argv, [error(UNRENDERABLE, "release", problem.message, problem.fix)]
    rendered_by: dict[str, str] = {}
    items: list[tuple[str, object]] = list(flags.typed_values().items())
    items += sorted(flags.extra_flags.items())
    for key, value in items:
        if value is False and key in type(flags).model_fields:
            continue  # an unset typed switch renders as nothing, whatever the release calls it
        try:
            flag = _resolve(key, release)
            if flag.dest in rendered_by:
                raise _Unrenderable(
                    f"{key} and {rendered_by[flag.dest]} are the same SGLang {release} flag "
                    f"({flag.long_name}).",
                    "Keep one of them.",
                )
            rendered_by[flag.dest] = key
            argv += _render_value(key, value, flag, release)
        except _Unrenderable as problem:
            problems.append(error(UNRENDERABLE, key, problem.message, problem.fix))
    if flags.model_path is None:
        problems.append(
            error(
                UNRENDERABLE,
                "model_path",
                "No model path is set.",
                "Set model.path in the stack, or server.model_path.",
            )
        )
    return argv, problems


def flag_problems(flags: ServerFlags, release: str) -> list[Finding]:
    """Every reason ``flags`` cannot be rendered for ``release``, as errors keyed by the flag as the
    stack spells it (``tp_size``, an extra flag's key, or ``release``); empty when it can."""
    return _collect(flags, release)[1]


def render_argv(flags: ServerFlags, release: str) -> list[str]:
    """The argv after ``python -m sglang.launch_server`` that ``release`` accepts.

    Canonical long option names, renamed flags mapped to the release's spelling, values checked
    against the release's table. Raises FlagError listing every flag that cannot be rendered.
    """
    argv, problems = _collect(flags, release)
    if problems:
        lines = "\n".join(f"  - {p.key}: {p.message} {p.fix}" for p in problems)
        raise FlagError(f"The launch flags cannot be rendered for SGLang {release}:\n{lines}")
    return argv


def render_command(
    flags: ServerFlags,
    release: str,
    python: str = "python",
    env: Mapping[str, str] | None = None,
    module: str = "sglang.launch_server",
) -> str:
    """One shell-safe command line: ``[VAR=value ...] python -m sglang.launch_server <argv>``.

    Values are quoted for a POSIX shell; a variable name that is not one raises FlagError.
    ``module`` is the launcher (the emulator's on the emulator host).
    """
    bad_names = [name for name in (env or {}) if not is_env_name(name)]
    if bad_names:
        raise FlagError(
            f"{', '.join(map(repr, bad_names))} cannot be environment variable names. "
            f"Use letters, digits and _, not starting with a digit."
        )
    assignments = [f"{name}={shlex.quote(value)}" for name, value in sorted((env or {}).items())]
    words = [python, "-m", module, *render_argv(flags, release)]
    return " ".join([*assignments, shlex.join(words)])


def canonical_flags(flags: ServerFlags, release: str) -> ServerFlags:
    """``flags`` with every flag without a typed field named by its dest in ``release``
    (``--schedule-policy`` is ``schedule_policy``): the value the state, the outputs and the host
    record. Raises FlagError naming the nearest real names for a flag the release lacks."""
    extras = {resolve_flag(key, release).dest: value for key, value in flags.extra_flags.items()}
    if extras == flags.extra_flags:
        return flags
    return flags.model_copy(update={"extra_flags": extras})


def show_value(value: FlagValue) -> str:
    """A flag's value as a person reads it: ``(set)`` for a switch, list items space-separated."""
    if value is True:
        return "(set)"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def shown_flags(flags: ServerFlags, release: str) -> dict[str, FlagValue]:
    """The flags as a person reads them: the option ``release`` spells for each (the flag's own
    name where the release has none), with its typed value, in render order."""
    shown: dict[str, FlagValue] = {}
    for name, value in launch_values(flags).items():
        try:
            option = _resolve(name, release).long_name
        except _Unrenderable:
            option = "--" + name.replace("_", "-")
        shown[option] = value
    return shown
