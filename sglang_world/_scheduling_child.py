"""Runs in a fresh interpreter: imports one release's scheduling code from its unpacked wheel, with
stand-ins for the packages that are not there, and reads the numbers that code computes.

    python -S -E -O -c <bootstrap> <result.json> <release folder> [<helper folder> ...]

Each number is the value of an expression evaluated in one of the release's own modules, after the
module ran (so ``int(os.environ.get(..., "4096"))`` or ``envs.X.get()`` has been executed by the
release, in an environment without ``SGLANG_*`` variables). Whether the release lets SGLang's
variable override a number is found the same way: its code runs again with the variable set.
Releases keep a number in one of a few homes (``sglang.srt.environ``'s ``envs`` from 0.5.3.post2
on, ``sglang.global_config`` before); the first home whose module defines the name is read. A
number no home defines, a value that is a stand-in, or an import that fails refuses the release,
with the reason.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import traceback
from typing import Any

from sglang_flags import _inert, _standins
from sglang_world.scheduling import VARIABLES

# The admission module imports half of SGLang's kernels, which stand-ins cannot carry through; its
# module-level constants are run on their own: the statement and the imports it reads.
_POLICY = "sglang/srt/managers/schedule_policy.py"

# name -> the homes, in order: (module, expression evaluated in that module's namespace)
HOMES: dict[str, tuple[tuple[str, str], ...]] = {
    "init_new_token_ratio": (
        ("sglang.srt.environ", "envs.SGLANG_INIT_NEW_TOKEN_RATIO.get()"),
        ("sglang.global_config", "global_config.default_init_new_token_ratio"),
    ),
    "min_new_token_ratio_factor": (
        ("sglang.srt.environ", "envs.SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR.get()"),
        ("sglang.global_config", "global_config.default_min_new_token_ratio_factor"),
    ),
    "new_token_ratio_decay_steps": (
        ("sglang.srt.environ", "envs.SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS.get()"),
        ("sglang.global_config", "global_config.default_new_token_ratio_decay_steps"),
    ),
    "retract_decode_steps": (
        ("sglang.srt.environ", "envs.SGLANG_RETRACT_DECODE_STEPS.get()"),
        ("sglang.global_config", "global_config.retract_decode_steps"),
    ),
    "clip_max_new_tokens": ((_POLICY, "CLIP_MAX_NEW_TOKENS"),),
    "ignore_eos_reserve_tokens": ((_POLICY, "IGNORE_EOS_RESERVE_TOKENS"),),
}


def _defines(module: Any, expression: str) -> bool:
    """Whether the first name of ``expression`` (and its next attribute) exist in ``module``."""
    head, _, rest = expression.partition(".")
    value = getattr(module, head.split("(")[0], None)
    if value is None or _inert.is_inert(value):
        return False
    attribute = rest.split(".")[0].split("(")[0]
    return not attribute or (hasattr(value, attribute) and not _inert.is_inert(getattr(value, attribute)))


def _module(name: str) -> Any | None:
    """The release's module ``name`` imported, or None when the release has no such file."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and name.startswith(error.name):
            return None
        raise


def _statement_namespace(release_dir: str, path: str, name: str) -> dict[str, Any] | None:
    """The namespace after running the module-level assignment to ``name`` in the release's file
    ``path``, preceded by the module's imports of the names it reads; None when there is none."""
    file = os.path.join(release_dir, path)
    if not os.path.exists(file):
        return None
    with open(file, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), file)
    assigned = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    if len(assigned) != 1:
        return None
    read = {node.id for node in ast.walk(assigned[0].value) if isinstance(node, ast.Name)}
    imports = [
        node
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and read & {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    ]
    namespace: dict[str, Any] = {"__name__": path[:-3].replace("/", ".")}
    exec(compile(ast.Module([*imports, assigned[0]], []), file, "exec"), namespace)
    return namespace


def _read(release_dir: str, home: str, expression: str, again: bool = False) -> tuple[bool, Any]:
    """(whether ``home`` defines ``expression``, its value there); ``again`` runs the home's module
    once more first, so a value computed at import sees the environment as it is now."""
    if home.endswith(".py"):
        namespace = _statement_namespace(release_dir, home, expression)
        return (False, None) if namespace is None else (True, namespace[expression])
    module = _module(home)
    if module is None or not _defines(module, expression):
        return False, None
    if again:
        module = importlib.reload(module)
    return True, eval(expression, vars(module))


def _reads_variable(release_dir: str, home: str, expression: str, variable: str, value: Any) -> bool:
    """Whether the release's number changes when SGLang's ``variable`` is set: run its code again
    with the variable set to a value it does not have."""
    os.environ[variable] = probe = "3" if value != 3 else "5"
    try:
        found, changed = _read(release_dir, home, expression, again=True)
    finally:
        del os.environ[variable]
        _read(release_dir, home, expression, again=True)
    return found and changed == float(probe)


def record(release_dir: str) -> dict[str, Any]:
    """Every number of ``HOMES``, each with the home it was read from; or the reasons to refuse."""
    _standins.install(release_dir, protected=["sglang", "sglang_flags", "sglang_world"])
    values: dict[str, Any] = {}
    homes: dict[str, str] = {}
    variables: dict[str, str] = {}
    refused: list[str] = []
    for name, candidates in HOMES.items():
        for home, expression in candidates:
            found, value = _read(release_dir, home, expression)
            if not found:
                continue
            if _inert.is_inert(value) or not isinstance(value, int | float) or isinstance(value, bool):
                refused.append(f"{name}: {expression} in {home} is {value!r}, not a number")
                break
            values[name], homes[name] = value, f"{home}: {expression}"
            variable = VARIABLES.get(name)
            if variable is not None and _reads_variable(release_dir, home, expression, variable, value):
                variables[name] = variable
            break
        else:
            refused.append(f"{name}: none of its homes defines it ({', '.join(h for h, _ in candidates)})")
    return {"values": values, "homes": homes, "variables": variables, "refused": refused}


def main(argv: list[str]) -> int:
    """Read the numbers of the release folder ``argv[1]`` and write them to ``argv[0]``."""
    out, release_dir, helpers = argv[0], argv[1], argv[2:]
    sys.path[:0] = [release_dir, *helpers]
    try:
        result = record(release_dir)
    except BaseException as error:  # anything the release raises is a reason to refuse it
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(release_dir)]
        where = f"{os.path.relpath(frames[-1].filename, release_dir)}:{frames[-1].lineno}" if frames else "?"
        result = {"refused": [f"importing it raised {type(error).__name__}: {error} (at {where})"]}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0
