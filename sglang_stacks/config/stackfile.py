"""Stack files (``stacks/Pulumi.<stack>.yaml``): read without Pulumi, and edited in one place.

Only the ``sglang-stacks:`` keys are read. Secret values (``secure:``) are never decrypted: the
file says which secret keys are set, and nothing more.

Edits (promote's sections, a trial's file, a fleet's roll-back file) go through `StackText`,
which edits the YAML with ruamel.yaml's round trip: comments, key order, quoting and number
formatting stay as their author wrote them, and the comments that introduce a section stay with
that section when its neighbour is replaced or removed.
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from sglang_stacks.config.spec import CONFIG_NAMESPACE, SECRET_KEYS, StackSpec, load_spec
from sglang_stacks.config.yaml_errors import yaml_error
from sglang_stacks.errors import SpecError

__all__ = [
    "StackFile",
    "StackText",
    "load_stack_spec",
    "read_stack_file",
    "stack_file_text",
    "stack_path",
    "write_stack_file",
]

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
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text)
    except FileNotFoundError:
        known = sorted(
            p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml")
        )
        raise SpecError(
            f"There is no stack file {path.name} in {stacks_dir.name}/. "
            f"Use one of: {', '.join(known) or 'none yet'}, or create it."
        ) from None
    except yaml.YAMLError as error:
        raise yaml_error(f"{stacks_dir.name}/{path.name}", text, error) from None
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


def _mapping_indent(text: str) -> int:
    """How far a nested mapping's keys sit in from their parent's key in ``text`` (2 if none)."""
    parent: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        depth = len(line) - len(line.lstrip(" "))
        if parent is not None and depth > parent and not stripped.startswith("- "):
            return depth - parent
        parent = depth if stripped.endswith(":") and not stripped.startswith("- ") else None
    return 2


def _indents(text: str) -> tuple[int, int, int]:
    """The file's own indentation, as ruamel.yaml's ``indent()`` takes it: a mapping's, a block
    sequence's items' and their dashes' offset, so an edit re-indents nothing it leaves alone."""
    mapping = _mapping_indent(text)
    # ruamel.yaml's guess gives the first block sequence's item indent and dash offset, if any.
    _, items, dash = load_yaml_guess_indent(text) if text.strip() else (None, None, None)
    if dash is None or items is None:
        return mapping, 2 * mapping, mapping
    return mapping, items, dash


def _round_trip(mapping: int = 2, sequence: int = 4, offset: int = 2) -> YAML:
    editor = YAML()  # round trip: comments, order, quotes and number formats kept
    editor.indent(mapping=mapping, sequence=sequence, offset=offset)
    editor.preserve_quotes = True
    editor.width = 4096  # never wrap a long value onto a second line
    return editor


def _commented(value: Any) -> Any:
    """``value`` with its mappings and lists as ruamel's, which can carry comments."""
    if isinstance(value, Mapping) and not isinstance(value, CommentedMap):
        return CommentedMap({key: _commented(item) for key, item in value.items()})
    if isinstance(value, list) and not isinstance(value, CommentedSeq):
        return CommentedSeq([_commented(item) for item in value])
    return value


def _after_slot(container: Any, key: Any) -> tuple[Any, Any, int]:
    """Where ruamel keeps the lines that follow ``container[key]`` in the file: on the deepest
    last item of its value (a mapping's slot 2, a sequence's slot 0)."""
    value = container[key]
    if isinstance(value, CommentedMap) and value:
        return _after_slot(value, next(reversed(value)))
    if isinstance(value, CommentedSeq) and value:
        return _after_slot(value, len(value) - 1)
    return container, key, 2 if isinstance(container, CommentedMap) else 0


def _take_after(container: Any, key: Any) -> str:
    """Removes and returns the comment lines after ``container[key]`` (they introduce what
    follows it); a comment at the end of its own last line stays."""
    owner, slot_key, position = _after_slot(container, key)
    slot = owner.ca.items.get(slot_key)
    if slot is None or slot[position] is None:
        return ""
    said: str = slot[position].value
    own, _, after = said.partition("\n")
    if own:
        slot[position].value = own + "\n"
    else:
        slot[position] = None
    return after


def _put_after(container: Any, key: Any, after: str) -> None:
    """Adds comment lines after ``container[key]``, below the comment lines already there."""
    if not after:
        return
    owner, slot_key, position = _after_slot(container, key)
    slot = owner.ca.items.setdefault(slot_key, [None, None, None, None])
    there = slot[position].value if slot[position] is not None else "\n"
    slot[position] = CommentToken(there + after, CommentMark(0), None)


class StackText:
    """A stack file's text, edited as YAML that keeps its comments, order and formatting."""

    def __init__(self, text: str, name: str = "the stack file") -> None:
        try:
            self._yaml = _round_trip(*_indents(text))
            document = self._yaml.load(text) if text.strip() else None
        except YAMLError as error:
            raise yaml_error(name, text, error) from None
        self._document: CommentedMap = document if isinstance(document, CommentedMap) else CommentedMap()
        config = self._document.get("config")
        if not isinstance(config, CommentedMap):
            config = CommentedMap()
            self._document["config"] = config
        self._config = config

    def section(self, name: str) -> Any:
        """The ``sglang-stacks:<name>`` section as the file holds it, or None."""
        return self._config.get(f"{CONFIG_NAMESPACE}:{name}")

    def put_section(self, name: str, value: Any) -> None:
        """Sets the ``sglang-stacks:<name>`` section to ``value`` (another file's section, copied
        without the comments that followed it there), in its place, or added at the end of
        ``config:``; ``None`` removes it. The comment lines that introduced the section after it
        stay in front of that section."""
        key, config = f"{CONFIG_NAMESPACE}:{name}", self._config
        if key in config:
            after = _take_after(config, key)
            if value is None:
                keys = list(config)
                before = keys[keys.index(key) - 1] if keys.index(key) else None
                del config[key]
                self._restore_after(before, after)
                return
        elif value is None:
            return
        else:
            last = next(reversed(config), None)
            after = _take_after(config, last) if last is not None else ""
        new = _commented(copy.deepcopy(value))
        config[key] = new
        if isinstance(new, CommentedMap | CommentedSeq) and new:
            _take_after(config, key)  # what followed it in its own file
        _put_after(config, key, after)

    def _restore_after(self, before: Any, after: str) -> None:
        if before is not None:
            _put_after(self._config, before, after)
        elif after:  # it was the first section: the lines now open `config:`
            self._config.ca.comment = [None, [CommentToken(after, CommentMark(0), None)]]

    def config(self) -> Mapping[str, Any]:
        """Every key under ``config:`` (full keys, other namespaces' too), as the file holds it."""
        return self._config

    def replace_config(self, values: Mapping[str, Any]) -> None:
        """Replaces every key under ``config:`` (full keys, ``sglang-stacks:server``); the rest of
        the file (``encryptionsalt``, comments outside ``config:``) stays."""
        self._config.clear()
        self._config.update(values)

    def text(self) -> str:
        """The file's text with the edits."""
        out = io.StringIO()
        self._yaml.dump(self._document, out)
        return out.getvalue()


def stack_file_text(
    sections: Mapping[str, Any], header: str = "", kept: Mapping[str, Any] | None = None
) -> str:
    """A new stack file's text: ``header`` as comment lines, the keys ``kept`` from an earlier file
    (``encryptionsalt``: Pulumi's secrets settings), and ``sections`` under ``config:`` as
    ``sglang-stacks:<section>``."""
    document = CommentedMap({name: value for name, value in (kept or {}).items() if name != "config"})
    document["config"] = {f"{CONFIG_NAMESPACE}:{key}": value for key, value in sections.items()}
    if header:
        document.yaml_set_start_comment(header)
    out = io.StringIO()
    _round_trip().dump(document, out)
    return out.getvalue()


def write_stack_file(path: Path, sections: Mapping[str, Any], header: str) -> None:
    """Writes ``path`` anew (`stack_file_text`), keeping the keys outside ``config:`` that the file
    there has (the secrets settings Pulumi wrote when it created the stack)."""
    kept = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    path.write_text(
        stack_file_text(sections, header, kept if isinstance(kept, dict) else None), encoding="utf-8"
    )
