"""Reading a stack file (``stacks/Pulumi.<stack>.yaml``) without Pulumi, for the companion CLI.

Only the ``sglang-stacks:`` keys are read. Secret values (``secure:``) are never decrypted: the
file says which secret keys are set, and nothing more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sglang_stacks.config.spec import CONFIG_NAMESPACE, SECRET_KEYS, StackSpec, load_spec
from sglang_stacks.errors import SpecError

__all__ = ["StackFile", "load_stack_spec", "read_stack_file", "stack_path"]

_STACK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class StackFile:
    """A stack file's sections (secrets left out) and the names of the secrets it sets."""

    stack: str
    path: Path
    sections: dict[str, Any]
    secret_keys: tuple[str, ...]


def stack_path(stack: str, stacks_dir: Path) -> Path:
    """Where the stack file of ``stack`` lives."""
    if not _STACK_NAME.match(stack):
        raise SpecError(f"{stack!r} is not a stack name. Use letters, digits, '.', '_' and '-'.")
    return stacks_dir / f"Pulumi.{stack}.yaml"


def _is_secret(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _nested_secrets(value: object, path: str) -> list[str]:
    if _is_secret(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nested_secrets(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nested_secrets(v, f"{path}[{i}]")]
    return []


def read_stack_file(stack: str, stacks_dir: Path) -> StackFile:
    """Read ``Pulumi.<stack>.yaml``; raises SpecError when it is missing or malformed."""
    path = stack_path(stack, stacks_dir)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = sorted(
            p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml")
        )
        raise SpecError(
            f"There is no stack file {path.name} in {stacks_dir.name}/. "
            f"Use one of: {', '.join(known) or 'none yet'}, or create it."
        ) from None
    except yaml.YAMLError as error:
        raise SpecError(
            f"{path.name} is not valid YAML ({error}). Fix the syntax at the place shown."
        ) from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise SpecError(f"{path.name} has no 'config:' mapping. Put the sglang-stacks: keys under 'config:'.")
    sections: dict[str, Any] = {}
    secrets: list[str] = []
    problems: list[str] = []
    prefix = f"{CONFIG_NAMESPACE}:"
    for key, value in config.items():
        if not isinstance(key, str) or not key.startswith(prefix):
            continue  # other namespaces configure providers, not this project
        name = key.removeprefix(prefix)
        if name in SECRET_KEYS or _is_secret(value):
            secrets.append(name)
            continue
        nested = _nested_secrets(value, key)
        if nested:
            problems.append(
                f"{', '.join(nested)} hold secrets inside a section. Secrets are separate keys "
                f"({', '.join(prefix + k for k in SECRET_KEYS)}); set them with `pulumi config set --secret`."
            )
        sections[name] = value
    if problems:
        raise SpecError(f"{path.name}: " + " ".join(problems))
    return StackFile(stack=stack, path=path, sections=sections, secret_keys=tuple(secrets))


def load_stack_spec(stack: str, stacks_dir: Path) -> StackSpec:
    """Read and validate a stack file into its spec."""
    return load_spec(read_stack_file(stack, stacks_dir).sections, stack)
