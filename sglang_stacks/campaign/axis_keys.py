"""The keys a campaign's axes vary, checked against the stack they vary before anything is made: each
must be a field of the stack file's sections (``server.cuda_graph_max_bs``,
``environment.emulator.time_scale``, ``draftModel``) or, under ``server.extra_flags``, a launch flag
of the SGLang release the candidates run. A key that is neither would make every candidate an
invalid stack; it is refused with the nearest valid name instead.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.config.flags import ServerFlags, field_name
from sglang_stacks.config.render import resolve_flag
from sglang_stacks.config.sections import EnvironmentSpec
from sglang_stacks.config.spec import StackSpec
from sglang_stacks.errors import FlagError, SpecError

__all__ = ["check_axis_keys", "field_path", "field_types", "refuse_listed"]

_EXTRA_FLAGS = "extra_flags"
_RELEASE_KEY = "environment.sglang_release"


def check_axis_keys(campaign: CampaignSpec, base: Mapping[str, Any]) -> None:
    """SpecError naming every axis key that is no field of the stack's sections and no flag of the
    release, each with the nearest valid name; ``base`` is the base stack's sections."""
    releases = _releases(campaign, base)
    problems = [
        f"{where} {key}: {problem}"
        for where, key in _keys(campaign)
        if (problem := _problem(key, releases)) is not None
    ]
    refuse_listed(
        problems,
        f"The campaign varies {len(problems)} key(s) that no stack has, so every candidate would be an "
        "invalid stack",
        "Fix the key in the campaign file; nothing was created.",
    )


def refuse_listed(problems: list[str], said: str, fix: str) -> None:
    """SpecError saying ``said``, each of ``problems`` on a line of its own, and ``fix``; none
    without problems."""
    if problems:
        listed = "\n".join(f"  - {line}" for line in problems)
        raise SpecError(f"{said}:\n{listed}\n{fix}")


def _keys(campaign: CampaignSpec) -> Iterable[tuple[str, str]]:
    for index, axis in enumerate(campaign.axes):
        if axis.key is not None:
            yield f"axes.{index}.key", axis.key
        for key in axis.zip or {}:
            yield f"axes.{index}.zip", key


def _releases(campaign: CampaignSpec, base: Mapping[str, Any]) -> list[str]:
    """The SGLang releases the candidates run: the base stack's, and those an axis sets."""
    environment = base.get("environment") or {}
    default = str(environment.get("sglang_release", EnvironmentSpec().sglang_release))
    found: dict[str, None] = {}
    for axis in campaign.axes:
        if axis.count() is None:  # a real interval varies a number, never the release
            continue
        for _, assignments in axis.points():
            if _RELEASE_KEY in assignments:
                value = assignments[_RELEASE_KEY]
                found[default if value in (None, "auto") else str(value)] = None
    return list(found) or [default]


def _problem(key: str, releases: list[str]) -> str | None:
    """What is wrong with ``key`` (a sentence with the fix), or None when a stack has it."""
    parts = key.split(".")
    model: type[BaseModel] = StackSpec
    walked: list[str] = []
    for index, part in enumerate(parts):
        names = _names(model)
        if part not in names:
            return _unknown(".".join(walked), part, names, releases)
        walked.append(part)
        rest = parts[index + 1 :]
        if model is ServerFlags and part == _EXTRA_FLAGS and rest:
            return _flag_problem(".".join(rest), releases)
        inner = _model_of(model, names[part])
        if inner is None:
            if rest and not _is_mapping(model, names[part]):
                value = ".".join(walked)
                return f"{value} is a value, it has no key {rest[0]!r}. Vary {value} itself."
            return None
        model = inner
    return None


def field_path(key: str) -> tuple[type[BaseModel], str, list[str]] | None:
    """Where ``key`` lands in the stack's sections: the section model, its field's name and the
    parts of the key left below that field (a mapping's key); None for a key no section has and
    for a launch flag under ``server.extra_flags``."""
    parts = key.split(".")
    model: type[BaseModel] = StackSpec
    for index, part in enumerate(parts):
        names = _names(model)
        if part not in names or (model is ServerFlags and names[part] == _EXTRA_FLAGS):
            return None
        inner = _model_of(model, names[part])
        if inner is None or index == len(parts) - 1:
            return model, names[part], parts[index + 1 :]
        model = inner
    return None


def _names(model: type[BaseModel]) -> dict[str, str]:
    """A model's keys as a file spells them (its alias, else its name) -> the field's name."""
    return {(info.alias or name): name for name, info in model.model_fields.items()}


def field_types(model: type[BaseModel], field: str) -> list[Any]:
    """The types a field holds, None left out of a union."""
    annotation = model.model_fields[field].annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _model_of(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    """The section model a field holds, or None for a value (or a mapping of values)."""
    nested = [a for a in field_types(model, field) if isinstance(a, type) and issubclass(a, BaseModel)]
    return nested[0] if nested else None


def _is_mapping(model: type[BaseModel], field: str) -> bool:
    """A field holding free keys (``environment.env``, ``environment.emulator.faults``)."""
    return any(
        typing.get_origin(a) in (dict, Mapping) or a in (dict, Mapping) for a in field_types(model, field)
    )


def _unknown(parent: str, part: str, names: Mapping[str, str], releases: list[str]) -> str:
    where = f"the {parent} section" if parent else "a stack"
    near = difflib.get_close_matches(part, list(names), n=1)
    if near:
        fix = f"did you mean {'.'.join(filter(None, (parent, near[0])))}?"
    elif not parent:
        fix = "an axis varies a key of server, environment, fleet or draftModel."
    else:
        fix = f"its keys are {', '.join(sorted(names))}."
    if parent == "server":
        # A flag of the release that the server section does not type goes under extra_flags.
        try:
            flag = resolve_flag(part, releases[0])
        except FlagError:
            pass
        else:
            return (
                f"the server section has no typed field {part!r}; SGLang {releases[0]}'s {flag.long_name} "
                f"is set as server.extra_flags.{part}."
            )
    return f"{where} has no key {part!r}; {fix}"


def _flag_problem(flag: str, releases: list[str]) -> str | None:
    if field_name(flag) in ServerFlags.model_fields:
        return f"{flag} is a typed field of the server section; vary server.{field_name(flag)} instead."
    for release in releases:
        try:
            resolve_flag(flag, release)
        except FlagError as error:
            return str(error)
    return None
