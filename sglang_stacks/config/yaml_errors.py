"""A stack file that is not valid YAML, said as an operator fixes it: the file, the line and column,
what the parser expected, the line itself with a caret under the place, and the usual fix."""

from __future__ import annotations

from sglang_stacks.errors import SpecError

__all__ = ["yaml_error"]

_FIX = (
    "Line the keys of one section up under each other (spaces, not tabs), and put a space after "
    "each key's colon; `sglang-stacks check <stack>` reads the file again in a second."
)


def yaml_error(where: str, text: str, error: Exception) -> SpecError:
    """The SpecError for ``text`` (the file ``where``) that a YAML parser refused with ``error``
    (PyYAML's or ruamel's: both mark the place)."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if mark is None:
        return SpecError(f"{where} is not valid YAML: {problem}. {_FIX}")
    lines = text.splitlines()
    shown = lines[mark.line] if 0 <= mark.line < len(lines) else ""
    caret = " " * mark.column + "^"
    return SpecError(
        f"{where}, line {mark.line + 1}, column {mark.column + 1}, is not valid YAML: {problem}.\n"
        f"    {shown}\n    {caret}\n{_FIX}"
    )
